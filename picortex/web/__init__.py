"""The admin panel (SPEC 13): a starlette app served by the `web` actor with hypercorn."""
