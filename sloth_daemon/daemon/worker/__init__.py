"""The worker loop and its collaborators: recording, adoption, pipelining, actions, lanes.
"""
