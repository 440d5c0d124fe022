"""JSON-RPC 2.0: framing and dispatch with no transport (``protocol``), and the CLI's client.

Kept free of imports: the CLI imports ``trainee.rpc.client`` (stdlib only) on
every run, and ``trainee.rpc.protocol`` (msgspec) is for the daemon side.
"""
