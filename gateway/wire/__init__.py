"""Protocol-neutral HTTP pieces: the server, the upstream client, headers, responses, ids, peers,
and the error triple with its fault labels.
"""
