"""The built-in Discord simulator (REST v10 + gateway) and offline Anthropic model endpoint."""

from picortex.sim.gateway import Delivery, GatewayStats
from picortex.sim.model import ModelCall, ModelReply, OfflineModel, default_answer
from picortex.sim.rest import InjectedError, RecordedRequest
from picortex.sim.simulator import BlastResult, DefaultWorld, Simulator, SimURLs
from picortex.sim.world import ApiError, SimError

__all__ = [
    "ApiError",
    "BlastResult",
    "DefaultWorld",
    "Delivery",
    "GatewayStats",
    "InjectedError",
    "ModelCall",
    "ModelReply",
    "OfflineModel",
    "RecordedRequest",
    "SimError",
    "SimURLs",
    "Simulator",
    "default_answer",
]
