"""The daemon: the long-running process that owns the queue (server, handlers, the worker loop).
"""
