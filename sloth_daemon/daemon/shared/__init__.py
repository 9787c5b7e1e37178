"""A daemon on a queue shared by several machines (PostgreSQL): membership, LISTEN, logs.
"""
