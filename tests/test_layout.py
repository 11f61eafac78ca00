"""The package's shape: actor modules stay small, and what a task wants told of its HTTP
requests travels in one context variable."""

from __future__ import annotations

import ast
from pathlib import Path

import picortex

PACKAGE = Path(picortex.__file__).parent
# The most lines an actor module may have: past it, a module does more than one job.
ACTOR_MODULE_LINES = 700


def test_every_actor_module_is_under_the_size_limit() -> None:
    sizes = {
        path.name: len(path.read_text(encoding="utf-8").splitlines())
        for path in (PACKAGE / "actors").glob("*.py")
    }
    assert sizes
    assert {name: n for name, n in sizes.items() if n >= ACTOR_MODULE_LINES} == {}


def _context_variables(path: Path) -> list[str]:
    """The ContextVar constructions in a module, as `module:line`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name == "ContextVar":
                found.append(f"{path.relative_to(PACKAGE.parent).as_posix()}:{node.lineno}")
    return found


def test_the_request_watch_is_the_one_context_variable() -> None:
    # The Discord and the model clients read the same variable (`discord.http.when_sent`), so
    # the typing indicator's order behind a model request has one path, not two.
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) for hit in _context_variables(path)]
    assert [hit.split(":")[0] for hit in found] == ["picortex/discord/http.py"]


# The most members a client protocol of an actor declares itself: a wider one is a bag of
# everything the app holds, where each actor should take the few roles it uses.
ROLE_MEMBERS = 8


def _protocol_members(path: Path) -> dict[str, int]:
    """Each Protocol class in a module, with how many members it declares itself."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        f"{path.name}:{node.name}": sum(
            isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) for item in node.body
        )
        for node in tree.body
        if isinstance(node, ast.ClassDef)
        and any(getattr(base, "id", None) == "Protocol" for base in node.bases)
    }


def test_actors_take_their_clients_by_role() -> None:
    members = {
        name: n
        for path in sorted((PACKAGE / "actors").glob("*.py"))
        for name, n in _protocol_members(path).items()
    }
    assert "channel_clients.py:ChannelClients" in members
    assert {name: n for name, n in members.items() if n > ROLE_MEMBERS} == {}


def _is_the_pipeline(node: ast.expr) -> bool:
    return ast.unparse(node) in ("pipe", "self.pipe")


def test_the_app_hands_the_router_and_the_channel_actors_their_roles_not_the_pipeline() -> None:
    tree = ast.parse((PACKAGE / "app.py").read_text(encoding="utf-8"))
    calls = {
        name: [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == name
        ]
        for name in ("Router", "ChannelActor", "RouterRoles", "channel_roles")
    }
    assert all(calls.values()), calls
    for call in calls["Router"] + calls["ChannelActor"]:
        assert not any(_is_the_pipeline(arg) for arg in call.args), ast.unparse(call)
    # Each of the router's roles is an object built for it, not the pipeline itself.
    for role in calls["RouterRoles"][0].keywords:
        assert isinstance(role.value, ast.Call), ast.unparse(role.value)
