"""An OpenAI-compatible gateway over a reinforge Engine that records token-exact trajectories.

Agents written against the `openai` client point their `base_url` at a session of the gateway;
every call is sampled by the same Engine the trainer uses, batched with the other agents' calls,
and recorded per episode as exactly the token ids that were sampled, with their behaviour
log-probs. See server.py (endpoint, sessions, errors), recorder.py (the join / split / branch
rule that keeps tokens exact), batcher.py (the flush rule) and tool_calls.py (function calling).
"""

from reinforge.gateway.recorder import EpisodeRecorder, TrajectoryPart
from reinforge.gateway.server import Gateway, GatewaySession
from reinforge.gateway.wire import GatewayError

__all__ = ["EpisodeRecorder", "Gateway", "GatewayError", "GatewaySession", "TrajectoryPart"]
