"""The lease queue on PostgreSQL, for several machines.
"""
