"""The lease queue on one SQLite file.
"""
