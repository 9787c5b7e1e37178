"""The keeper: the small process that outlives the daemon and owns running jobs.

Nothing here imports the daemon or the queue backends; the daemon imports the wire
contract (wire.py), process identity (procident.py) and the job runner from here.
"""
