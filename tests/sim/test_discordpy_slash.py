"""discord.py's own application-command machinery against the simulator's interactions.

discord.py syncs a command tree (the bulk-overwrite route), receives INTERACTION_CREATE,
answers on the callback route (a message and a deferral), edits `@original` and sends a
follow-up: if the simulator's shapes drifted from Discord's, discord.py would fail here.
"""

from __future__ import annotations

from pathlib import Path

from picortex.sim import DefaultWorld, Simulator, SimURLs
from tests.sim.test_discordpy_fidelity import _Events, drive_client

CLIENT = r"""
import json
import logging
import sys

import discord
from discord import app_commands

discord.http.Route.BASE = sys.argv[1]
intents = discord.Intents.default()
client = discord.AutoShardedClient(intents=intents, guild_ready_timeout=0.2)
tree = app_commands.CommandTree(client)
group = app_commands.Group(name="picortex", description="Talk to picortex")


def emit(**fields):
    print(json.dumps(fields), flush=True)


@group.command(name="ping", description="Answer privately")
async def ping(interaction: discord.Interaction):
    emit(event="ping", user=interaction.user.id, channel=interaction.channel_id)
    await interaction.response.send_message("pong", ephemeral=True)


@group.command(name="ask", description="Defer, then answer")
@app_commands.describe(text="Your question")
async def ask(interaction: discord.Interaction, text: str):
    emit(event="ask", text=text, guild=interaction.guild_id)
    await interaction.response.defer(thinking=True)
    await interaction.edit_original_response(content="answer: " + text)
    await interaction.followup.send("and more")
    emit(event="answered")


@group.command(name="greet", description="Name a user")
async def greet(interaction: discord.Interaction, user: discord.User):
    await interaction.response.send_message(f"hello {user.name}")


tree.add_command(group)


@client.event
async def on_ready():
    synced = await tree.sync()
    emit(event="synced", names=[c.name for c in synced], ids=[c.id for c in synced])


client.run(sys.argv[2], log_handler=logging.StreamHandler(sys.stderr), log_level=logging.WARNING)
"""


async def test_discordpy_syncs_and_answers_interactions(
    sim: Simulator, urls: SimURLs, world: DefaultWorld, tmp_path: Path
) -> None:
    await drive_client(CLIENT, sim, urls, tmp_path, lambda events: _exchange(sim, world, events))


async def _exchange(sim: Simulator, world: DefaultWorld, events: _Events) -> None:
    synced = await events.next("synced")
    registered = sim.app_commands()
    assert synced["names"] == ["picortex"]
    assert synced["ids"] == [int(registered[0]["id"])]
    subs = [o["name"] for o in registered[0]["options"]]
    assert subs == ["ping", "ask", "greet"]

    ping = sim.run_slash(world.general_id, world.alice_id, "picortex ping")
    seen = await events.next("ping")
    assert (seen["user"], seen["channel"]) == (world.alice_id, world.general_id)
    await sim.wait_answered(ping)
    assert ping.response_type == 4 and ping.ephemeral and ping.text == "pong"

    ask = sim.run_slash(world.general_id, world.bob_id, "picortex ask text:what is up")
    assert (await events.next("ask"))["text"] == "what is up"
    await events.next("answered")
    assert [a.kind for a in ask.answers] == ["deferred", "edit", "followup"]
    assert ask.text == "answer: what is up\nand more"
    shown = sim.bot_messages(world.general_id)
    assert [m["content"] for m in shown[-2:]] == ["answer: what is up", "and more"]

    greet = sim.run_slash(world.general_id, world.alice_id, f"picortex greet <@{world.bob_id}>")
    await sim.wait_answered(greet)
    assert greet.text == "hello bob"
