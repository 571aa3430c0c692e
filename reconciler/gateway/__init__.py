"""The gateway on the control node: its routes derived from the lanes' state, and the router that holds them.

- `routes`: the pure part, which workers each served model name should have (`desired_routes`);
- `router`: what lanes needs of a router (`Router`, a Protocol) and the step that makes one match (`reconcile`);
- `smg`: Shepherd Model Gateway behind that Protocol, through its worker API (`/workers`);
- `launch`: how systemd starts SMG with its control-plane key out of the command line.
"""
