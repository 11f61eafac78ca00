"""Nothing outside `picortex.store` sees a connection: every read and write there is a named
query, so another backend can answer the same calls (DESIGN: the store is a protocol)."""

from __future__ import annotations

import ast
from pathlib import Path

PICORTEX = Path(__file__).resolve().parents[2] / "picortex"
# Ways into the store's insides: a function of the connection queued, run or read, or the
# connection itself.
STORE_INSIDES = frozenset({"submit", "_submit", "call", "read", "db", "_reads"})


def boundary_crossings(root: Path) -> list[str]:
    """`file:line: what` for each place outside root/store/ that reaches past the queries."""
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        if (root / "store") in path.parents:
            continue
        where = path.relative_to(root.parent)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "picortex.store"
            ):
                found += [
                    f"{where}:{node.lineno}: imports the connection class {alias.name}"
                    for alias in node.names
                    if alias.name == "Store"
                ]
            elif isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if "apsw" in names or (isinstance(node, ast.ImportFrom) and node.module == "apsw"):
                    found.append(f"{where}:{node.lineno}: imports apsw")
            elif (
                isinstance(node, ast.Attribute)
                and node.attr in STORE_INSIDES
                and "store" in ast.unparse(node.value).lower()
            ):
                found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_outside_the_store_reaches_past_its_named_queries() -> None:
    assert boundary_crossings(PICORTEX) == []


def test_the_check_sees_each_way_in(tmp_path: Path) -> None:
    root = tmp_path / "picortex"
    (root / "store").mkdir(parents=True)
    (root / "store" / "actor.py").write_text("self.db.submit(lambda db: db.x())\n")
    (root / "app.py").write_text(
        "import apsw\n"
        "from picortex.store import Store, StoreActor\n"
        "clients.store.submit(lambda db: db.forget_channel(1))\n"
        "await self._store().read(lambda db: db.is_seen(1))\n"
        "await store.call(prune)\n"
        "bot.store.db.close()\n"
        "handle.read(10)\n"
        "tools.call('name', {})\n"
    )
    assert boundary_crossings(root) == [
        "picortex/app.py:1: imports apsw",
        "picortex/app.py:2: imports the connection class Store",
        "picortex/app.py:3: clients.store.submit",
        "picortex/app.py:4: self._store().read",
        "picortex/app.py:5: store.call",
        "picortex/app.py:6: bot.store.db",
    ]
