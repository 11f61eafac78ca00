"""Builds the supervision tree from Settings and runs it (`picortex run`).

    root (rest_for_one, in start order)
      action_log
      store (the database's owner: its own thread, group commit, read models)
      services (one_for_one): context_cache, llm, polls, control, loop_lag, pruner,
        web (when [web] enabled)
      gateway (one shard), or gateways (one_for_one: gateway-<id> per shard held); with
        shard leases (PostgreSQL), gateways (dynamic) and shard_leases, which starts and
        stops a gateway per shard as it takes and hands back their leases
      channels (dynamic one_for_one, one transient actor per channel)
      router
      watchdog (turns a REST 401 into exit code 3)

The services sit under their own one_for_one supervisor rather than in the root's
rest_for_one chain: a crashed LLM or cache actor is restarted alone, so it never
reconnects the gateway (which would lose events and a resumable session).

The store is opened before the tree starts and closed after it stops; while the tree runs,
the store actor owns the connection on a thread of its own (picortex/store/actor.py), so no
SQLite call (or busy wait) ever runs on the event loop.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

import httpx
import trio

import picortex.store.unsent as unsent
from picortex.actors.action_log import ActionLog
from picortex.actors.catch_up import catch_up
from picortex.actors.channel import ChannelActor
from picortex.actors.channel_roles import channel_roles
from picortex.actors.context_cache import ContextCache
from picortex.actors.control import ControlServer, socket_path
from picortex.actors.ledger import LedgerBudget
from picortex.actors.llm import LLMActor
from picortex.actors.pipeline import (
    AnswerDeadlines,
    ChannelRegistry,
    Pipeline,
    SettingsSource,
    TriggerBook,
)
from picortex.actors.pruner import Pruner
from picortex.actors.router import Router
from picortex.actors.router_clients import (
    FeedRole,
    PersonaIndexRole,
    PostRole,
    ReadRole,
    RouterRoles,
    SlashRole,
)
from picortex.actors.shard_fence import ShardFence
from picortex.actors.shard_leases import HAND_BACK_SECONDS, ShardLeaseKeeper
from picortex.actors.web import WebActor
from picortex.config import Settings
from picortex.core.leases import Want
from picortex.core.personas import PersonaSet
from picortex.core.redact import remember_secrets
from picortex.core.triggerlog import TriggerEntry
from picortex.discord.gateway import GatewayActor, IdentifyTurns
from picortex.discord.protocol import GatewayTimings
from picortex.discord.rest import RestClient
from picortex.errors import ConfigError, FatalDiscordError, PicortexError
from picortex.files import private_dir
from picortex.runtime.background import BackgroundTasks
from picortex.runtime.faults import FaultPoints
from picortex.runtime.heap import freeze_startup_heap
from picortex.runtime.lag import LoopLag
from picortex.runtime.supervisor import (
    ChildSpec,
    DynamicSupervisor,
    Strategy,
    Supervisor,
    run_root,
)
from picortex.store.backends import open_shared_limits, open_store
from picortex.store.personas import PersonaLoader
from picortex.store.pg.cluster import node_name
from picortex.store.queries import SessionQueries
from picortex.types import BotIdentity

if TYPE_CHECKING:
    from picortex.actors.cluster_budget import ClusterBudget
    from picortex.store.pg.leases import ShardLeases
    from picortex.web.panel import Panel

logger = logging.getLogger(__name__)

STATUS_TRIGGERS: Final = 10  # last triggers shown by `picortex status`
# A shard handed back: how often we look whether its messages in hand are done.
SETTLE_POLL_SECONDS: Final = 0.05


class _PersistedSessions:
    """Each shard's gateway session in `picortex.db`: read once at start, written through
    the store actor's queue (never a wait on the event loop)."""

    def __init__(
        self, loaded: dict[tuple[int, int], tuple[str, str, int] | None], store: SessionQueries
    ) -> None:
        self._loaded = loaded
        self._store = store

    def gateway_session(self, shard: tuple[int, int]) -> tuple[str, str, int] | None:
        return self._loaded.get(shard)

    def save_gateway_session(
        self, shard: tuple[int, int], session_id: str, url: str, seq: int, at: float
    ) -> None:
        self._store.save_gateway_session(shard, session_id, url, seq, at)

    def clear_gateway_session(self, shard: tuple[int, int]) -> None:
        self._store.clear_gateway_session(shard)

    def taken(self, shard: tuple[int, int], saved: tuple[str, str, int] | None) -> None:
        """A shard's lease was taken: its session as read from the database just now."""
        self._loaded[shard] = saved


class Bot:
    """One bot process: every actor, wired together; `run` supervises them."""

    def __init__(
        self,
        settings: Settings,
        *,
        shard: tuple[int, int] = (0, 1),
        shards: Sequence[tuple[int, int]] = (),
        gateway_timings: GatewayTimings | None = None,
        llm_http_client_factory: Any = None,
        rest_client: httpx.AsyncClient | None = None,
        leased: Want | None = None,
        node: str | None = None,
        deadlines: AnswerDeadlines | None = None,
    ) -> None:
        """`shards`: every (id, count) this process serves; empty: just `shard`. `leased`
        (with PostgreSQL): the shards are taken by lease as they are free instead; `node`:
        its name in the cluster (default: host and pid)."""
        if not settings.discord_token:
            raise ConfigError("DISCORD_BOT_TOKEN is not set")
        remember_secrets(settings.discord_token, settings.anthropic_api_key)
        private_dir(settings.home)
        self.settings = settings
        self.faults = FaultPoints.parse(settings.fault_inject)
        # Shards held by lease (PostgreSQL) start with none: each is adopted when taken.
        clustered = leased is not None and bool(settings.database_url)
        held = () if clustered else (tuple(shards) or (shard,))
        self.store = open_store(settings, shards=held)
        self.leased = leased if self.store.clustered else None
        self.node = node or node_name()
        self.store.node = self.node
        # Read once, before anything is queued: the sessions a killed process left.
        sessions = _PersistedSessions({s: self.store.gateway_session(s) for s in held}, self.store)
        self.source = SettingsSource(settings, self.store)
        live = self.source()
        self.events = ActionLog(
            settings.action_log_path, live.action_log_max_bytes, faults=self.faults
        )
        self.store.events = self.events  # where an unreachable database is told
        if self.store.clustered:
            # What the last run could not hand to the database before it stopped goes first.
            self.store.replay_unsent(settings.home / unsent.WRITES_FILE)
        # With a database URL, Discord's global limit and identify buckets are the cluster's.
        self.limits = open_shared_limits(settings)
        self.rest = RestClient(
            settings.api_base,
            settings.discord_token,
            client=rest_client,
            events=self.events,
            shared=self.limits.rest if self.limits is not None else None,
        )
        self.cache = ContextCache(
            settings.cache_dir,
            rest=self.rest,
            messages_per_channel=live.cache_messages_per_channel,
            max_bytes=live.cache_max_bytes,
            fetch_cooldown=live.fetch_cooldown_seconds,
            events=self.events,
            faults=self.faults,
        )
        self.budget: LedgerBudget | ClusterBudget
        if settings.database_url:
            # A cluster's ceilings hold across its processes (SPEC 17): in the database.
            from picortex.actors.cluster_budget import cluster_budget

            self.budget = cluster_budget(
                settings.database_url, self.source, self.events, home=settings.home
            )
            self.budget.refresh()
        else:
            self.budget = LedgerBudget(self.store, self.source, self.events)
        # This period's and today's spend are read now, before the store's thread is busy:
        # the budget never reads SQLite on the event loop later.
        self.budget.totals()
        self.budget.users()
        self.llm = LLMActor(
            api_key=settings.anthropic_api_key,
            base_url=settings.anthropic_base_url,
            models=live.models,
            prices=live.prices,
            events=self.events,
            budget=self.budget,
            faults=self.faults,
            http_client_factory=llm_http_client_factory,
        )
        # `config set models.*` (chat or CLI) reaches the LLM actor on the next message.
        self.source.subscribe(lambda s: self.llm.reconfigure(models=s.models, prices=s.prices))
        self.source.subscribe(lambda s: self.cache.set_fetch_cooldown(s.fetch_cooldown_seconds))
        personas = PersonaLoader(settings.home)
        personas.load()  # bad persona files stop the start with exit code 2
        for warning in personas.current.warnings:
            logger.warning("%s", warning)
        # Told by any actor that Discord refused the token: the watchdog stops the bot.
        self._fatal: FatalDiscordError | None = None
        self._fatal_event = trio.Event()
        self.tasks = BackgroundTasks()
        self.pipe = Pipeline(
            settings=self.source,
            store=self.store,
            rest=self.rest,
            cache=self.cache,
            llm=self.llm,
            events=self.events,
            bot=BotIdentity(),
            registry=ChannelRegistry(),
            triggers=TriggerBook(),
            answer_timeout=(deadlines or AnswerDeadlines()).answer_timeout,
            crash_drain_seconds=(deadlines or AnswerDeadlines()).crash_drain_seconds,
            home=settings.home,
            faults=self.faults,
            personas=personas,
            spawn=self.tasks.spawn,
            fatal=self.on_fatal,
        )
        self.channels = DynamicSupervisor("channels", events=self.events)
        # Shards by lease: a request is answered only while its shard is held (SPEC 17).
        self.fence = ShardFence(self.leased.count) if self.leased is not None else None
        pipe = self.pipe
        channel_side = channel_roles(pipe)
        self.router = Router(
            RouterRoles(
                reads=ReadRole(pipe.settings, pipe.store, pipe.bot, pipe.faults),
                feeds=FeedRole(
                    pipe.events,
                    pipe.cache,
                    pipe.handled,
                    pipe.registry,
                    pipe.answers_seen,
                    pipe.triggers,
                ),
                posting=PostRole(pipe.rest, pipe.replies, pipe.spawn),
                slash=SlashRole(
                    pipe.settings,
                    pipe.store,
                    pipe.replies,
                    pipe.rest,
                    pipe.events,
                    pipe.spawn,
                    pipe.fatal,
                ),
                personas=PersonaIndexRole(pipe.personas, pipe.events, pipe.store),
            ),
            self.channels,
            lambda channel_id, inbox, windows: ChannelActor(
                channel_id, inbox, channel_side, windows=windows, fence=self.fence
            ),
            catch_up=self._catch_up,
            fence=self.fence,
        )
        # One gateway actor per shard, all handing dispatches to the one router (a message's
        # channel decides its mailbox) and sharing the session start limit.
        turns = IdentifyTurns(
            (gateway_timings or GatewayTimings()).identify_window,
            gate=self.limits.identify if self.limits is not None else None,
        )
        handled = self.pipe.handled
        handled.shard_count = self.leased.count if self.leased is not None else held[0][1]

        token = settings.discord_token

        def new_gateway(held_shard: tuple[int, int]) -> GatewayActor:
            return GatewayActor(
                token,
                self.rest,
                self.events,
                _shard_dispatch(self.router.on_dispatch, *held_shard),
                shard=held_shard,
                timings=gateway_timings,
                # Persisted so a restarted process RESUMEs and Discord replays what it missed.
                sessions=sessions,
                safe_seq=functools.partial(handled.safe_seq, held_shard[0]),
                turns=turns,
            )

        self.gateways = [new_gateway(held_shard) for held_shard in held]
        self.leases: ShardLeaseKeeper | None = None
        self.lease_table: ShardLeases | None = None
        self.shard_gateways: DynamicSupervisor | None = None
        if self.leased is not None:
            self.leases = self._lease_keeper(self.leased, new_gateway, sessions)
        self.control = ControlServer(socket_path(settings.home), self.snapshot)
        # Wall-clock seconds: catch-up compares message times (from their ids) with it.
        self.wall_clock: Callable[[], float] = time.time
        self.lag = LoopLag()
        self.pruner = Pruner(self.store, self.events)
        self.web: WebActor | None = None
        if live.web.enabled:
            self.web = WebActor(live.web, settings.home, self.panel, self.events)
        self._started_at = 0.0
        # Services that fail alone: a crashed LLM actor must not reconnect the gateway.
        self.services = Supervisor(
            "services",
            Strategy.ONE_FOR_ONE,
            [
                *([ChildSpec("discord_limits", self.limits.run)] if self.limits else []),
                ChildSpec("context_cache", self.cache.run),
                ChildSpec("llm", self.llm.run),
                # Polls, slash deferral timers, catch-up, command registration.
                ChildSpec("polls", self.tasks.run),
                ChildSpec("control", self.control.run),
                ChildSpec("loop_lag", self.lag.run),
                ChildSpec("pruner", self.pruner.run),
                # A cluster's settlements, sent to the database (again after a failure).
                *(
                    []
                    if isinstance(self.budget, LedgerBudget)
                    else [ChildSpec("ceilings", self.budget.run)]
                ),
                *([ChildSpec("web", self.web.run)] if self.web is not None else []),
            ],
            events=self.events,
        )
        # One shard: the gateway itself; many: a one_for_one supervisor over them, so one
        # shard's reconnect never drops another's session.
        self.gateway_group: Supervisor | None = None
        gateway_children: list[ChildSpec] = []
        if self.leases is not None:
            assert self.shard_gateways is not None
            gateway_children = [
                ChildSpec("gateways", self.shard_gateways.run),
                # Stopped before the gateways: it hands each shard back (SPEC 17).
                ChildSpec("shard_leases", self.leases.run, grace=3 * HAND_BACK_SECONDS),
            ]
        elif len(self.gateways) == 1:
            gateway_children = [ChildSpec("gateway", self.gateway.run)]
        else:
            self.gateway_group = Supervisor(
                "gateways",
                Strategy.ONE_FOR_ONE,
                [
                    ChildSpec(f"gateway-{s[0]}", gw.run)
                    for s, gw in zip(held, self.gateways, strict=True)
                ],
                events=self.events,
            )
            gateway_children = [ChildSpec("gateways", self.gateway_group.run)]
        self.root = Supervisor(
            "root",
            Strategy.REST_FOR_ONE,
            [
                ChildSpec("action_log", self.events.run, grace=10.0),
                ChildSpec("store", self.store.run, grace=15.0),
                ChildSpec("services", self.services.run, grace=25.0),
                # The gateway comes before the pipeline: it only needs the router's mailbox,
                # which outlives the router, so a crash loop in the channels never drops the
                # Discord session; dispatches wait in that mailbox while they restart.
                *gateway_children,
                ChildSpec("channels", self.channels.run),
                ChildSpec("router", self.router.run, mailbox=self.router.inbox),
                ChildSpec("watchdog", self._watchdog),
            ],
            events=self.events,
        )

    @property
    def gateway(self) -> GatewayActor:
        """The first shard's gateway (IndexError with leases and no shard held)."""
        return self.gateways[0]

    def _lease_keeper(
        self,
        want: Want,
        new_gateway: Callable[[tuple[int, int]], GatewayActor],
        sessions: _PersistedSessions,
    ) -> ShardLeaseKeeper:
        """Shards by lease (SPEC 17): a gateway per shard held, started and stopped with it."""
        self.lease_table = table = self.store.shard_leases()
        self.shard_gateways = gateways = DynamicSupervisor("gateways", events=self.events)
        by_id: dict[int, GatewayActor] = {}

        def make(shard: tuple[int, int], saved: tuple[str, str, int] | None) -> GatewayActor:
            sessions.taken(shard, saved)
            by_id[shard[0]] = gateway = new_gateway(shard)
            return gateway

        def on_held(held: tuple[tuple[int, int], ...]) -> None:
            self.gateways = [by_id[shard_id] for shard_id, _ in held]
            self.store.shards = held  # the heartbeat names them

        return ShardLeaseKeeper(
            table,
            want,
            node=self.node,
            lease_seconds=self.settings.cluster.lease_seconds,
            gateways=gateways,
            make_gateway=make,
            adopt=self.store.adopt_shard,
            settle=self._settle_shard,
            flush=self._flush_handed_back,
            fence=self.fence,
            events=self.events,
            on_held=on_held,
            present=functools.partial(setattr, self.store, "beating"),
        )

    async def _settle_shard(self, shard: tuple[int, int]) -> None:
        """A shard handed back: its messages in hand finish (while the channels still run);
        the keeper then commits every queued write (handled marks, its session)."""
        handled = self.pipe.handled
        # A short poll (the ledger tells nobody when a message is done), bounded by the keeper.
        while self.root.running("channels") and handled.in_hand_of(shard[0]):  # noqa: ASYNC110
            await trio.sleep(SETTLE_POLL_SECONDS)

    async def _flush_handed_back(self) -> None:
        """Before leases are released: a shard whose stopped requests came by catch-up loses
        its saved session (a RESUME would not replay them: its next holder IDENTIFYs and
        catches up), then every queued write is committed."""
        count = self.pipe.handled.shard_count
        for shard_id in sorted(self.pipe.handled.unreplayable_left()):
            self.store.clear_gateway_session((shard_id, count))
        await self.store.flush()

    def on_fatal(self, exc: FatalDiscordError) -> None:
        """Discord refused us for good (a 401 on REST): stop the bot with exit code 3."""
        if self._fatal is None:
            self._fatal = exc
            self._fatal_event.set()

    async def _catch_up(self, shard_id: int | None = None) -> None:
        """After a fresh IDENTIFY of shard `shard_id` (None: not known, every shard held):
        answer the trusted triggers missed meanwhile in its channels (SPEC 4)."""
        count = self.pipe.handled.shard_count
        shards = None if shard_id is None else [(shard_id, count)]
        try:
            await catch_up(
                self.pipe, self.router.deliver_catch_up, shards=shards, wall_clock=self.wall_clock
            )
        except Exception as exc:  # a failed catch-up must not take the services down
            logger.exception("catch-up failed")
            self.events.emit("error", scope="catch-up", message=f"catch-up failed: {exc!r}")

    async def _watchdog(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        task_status.started()
        await self._fatal_event.wait()
        assert self._fatal is not None
        raise self._fatal

    def snapshot(self) -> dict[str, Any]:
        """What `picortex status` shows."""
        restarts = {k: v for k, v in self.root.restart_counts().items() if v}
        restarts.update({k: v for k, v in self.services.restart_counts().items() if v})
        restarts.update({k: v for k, v in self.channels.restart_counts().items() if v})
        if self.gateway_group is not None:
            restarts.update({k: v for k, v in self.gateway_group.restart_counts().items() if v})
        if self.shard_gateways is not None:
            restarts.update({k: v for k, v in self.shard_gateways.restart_counts().items() if v})
        shards = [_gateway_status(gw) for gw in self.gateways]
        if self.leases is not None:
            epochs = {h.shard[0]: h.epoch for h in self.leases.held.values()}
            for shard in shards:
                shard["epoch"] = epochs.get(shard["shard"][0])
        return {
            "gateway": shards[0] if shards else {"state": "no shard held", "shard": None},
            # Every shard this process holds (the first is "gateway" above).
            "shards": shards,
            "pid": os.getpid(),
            "database": self.store.database_state(),
            "uptime_s": round(trio.current_time() - self._started_at, 1),
            "channel_actors": len(self.channels.children()),
            "mailboxes": self.router.mailbox_depths(),
            "mailbox_overflows": self.router.mailbox_overflows(),
            "ingest": self.router.ingest_counts(),
            "loop_lag_ms": self.lag.take(),
            "restarts": restarts,
            "warnings": list(self.pipe.personas.current.warnings) if self.pipe.personas else [],
            "budget": self.budget.summary(),
            "budget_global": self.budget.totals(),
            "budget_users": self.budget.users(),
            "triggers": [self._named(t) for t in self.pipe.triggers.log.snapshot(STATUS_TRIGGERS)],
            "web": self.web.status() if self.web is not None else None,
        }

    def panel(self) -> Panel:
        """The web panel over this bot's store, actors and registries."""
        # Imported here: a bot without the panel never loads the web stack.
        from picortex.web.panel import Panel

        pipe = self.pipe
        personas = pipe.personas

        def current_personas() -> PersonaSet:
            return personas.current if personas is not None else PersonaSet()

        def triggers() -> Sequence[TriggerEntry]:
            log = pipe.triggers.log
            return (*log.trusted, *log.untrusted)

        return Panel(
            settings=self.source,
            store=self.store,
            events=self.events,
            home=self.settings.home,
            action_log_path=self.settings.action_log_path,
            snapshot=self.snapshot,
            registry=pipe.registry,
            cache=self.cache,
            llm=self.llm,
            rest=self.rest,
            personas=current_personas,
            triggers=triggers,
            dm_channels=pipe.replies.dm_channels,
            bot_user=lambda: (pipe.bot.user_id, pipe.bot.username),
            forget_triggers=pipe.triggers.forget_author,
        )

    def _named(self, trigger: dict[str, object]) -> dict[str, object]:
        """A trigger-log entry with its channel's name, when known."""
        channel_id = trigger.get("channel_id")
        channel = self.pipe.registry.get(channel_id) if isinstance(channel_id, int) else None
        name = channel.name if channel is not None and channel.name else "dm"
        return {**trigger, "channel_name": name}

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> int:
        """Run the tree until cancelled (exit 0), refused (FatalDiscordError) or exhausted (70)."""
        self._started_at = trio.current_time()
        try:
            async with self.rest:
                return await run_root(self.root, task_status=task_status)
        finally:
            self.close()

    def close(self) -> None:
        """Release the database connections (idempotent; `run` does it when it ends).

        A bot built and never run holds its store's connections too: call this then.
        """
        if not isinstance(self.budget, LedgerBudget):
            self.budget.close()  # what is still unsettled reaches the database
        if self.lease_table is not None:
            self.lease_table.close()
        self.store.close()


def _shard_dispatch(
    on_dispatch: Callable[[str, Any, int | None], None], shard_id: int, count: int
) -> Callable[[str, Any, int | None], None]:
    """A shard's dispatches with `seq * count + shard_id`: the handled ledger keeps each
    shard's session seq apart (the same number in two sessions means different events)."""
    if count == 1:
        return on_dispatch

    def dispatch(name: str, data: Any, seq: int | None) -> None:
        on_dispatch(name, data, None if seq is None else seq * count + shard_id)

    return dispatch


def _gateway_status(gateway: GatewayActor) -> dict[str, Any]:
    """One shard's connection as `picortex status` and the panel show it."""
    gw = gateway.status()
    return {
        "state": str(getattr(gw.state, "value", gw.state)),
        "session_id": gw.session_id,
        "seq": gw.seq,
        "heartbeat_latency_ms": (
            None if gw.heartbeat_latency_ms is None else round(gw.heartbeat_latency_ms, 1)
        ),
        "reconnects": gw.reconnects,
        "last_close_code": gw.last_close_code,
        "shard": list(gw.shard),
    }


def run_forever(
    settings: Settings,
    *,
    shards: Sequence[tuple[int, int]] = ((0, 1),),
    leased: Want | None = None,
) -> int:
    """`picortex run`: until SIGINT/SIGTERM (exit 0), a fatal refusal (3) or give-up (70)."""
    bot = Bot(settings, shards=shards, leased=leased)
    # Everything is imported and wired: keep full collections off these objects for good.
    frozen = freeze_startup_heap()
    logger.debug("%d start-up objects frozen out of garbage collection", frozen)

    async def main() -> int:
        code = 0
        failure: PicortexError | None = None
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:

                async def run_bot() -> None:
                    nonlocal code, failure
                    try:
                        code = await bot.run()
                    except PicortexError as exc:
                        if not exc.fatal:
                            raise
                        # Raised again outside the nursery, so the CLI sees the error itself
                        # (not an exception group) and exits with its code and one line.
                        failure = exc
                    finally:
                        nursery.cancel_scope.cancel()

                nursery.start_soon(run_bot)
                async for signum in signals:
                    logger.info("received %s: shutting down", signal.Signals(signum).name)
                    nursery.cancel_scope.cancel()
                    break
        if failure is not None:
            raise failure
        return code

    return trio.run(main)
