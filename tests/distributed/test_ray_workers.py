"""Ray workers: RayEngine (the Engine protocol over Ray actors, versioned weight sync, dead and
stuck workers), reward functions in Ray actors behind the RewardScorer, and a local cluster that
listens on loopback only. One Ray session (2 CPUs) for the whole module."""

from __future__ import annotations

import gc
import copy
import ipaddress
import os
import threading
import time
from pathlib import Path

import pytest
import torch

from reinforge.engines.base import SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.rewards.builtin import build_component
from reinforge.rewards.scorer import NamedReward, RewardScorer
from reinforge.rollout.trajectory import single_turn_trajectory
from reinforge.tasks.task import Task
from deadlines import PROCESS_START_S

ray = pytest.importorskip("ray")

from reinforge.distributed import ray_engine  # noqa: E402
from reinforge.distributed.ray_cluster import start_ray, stop_ray  # noqa: E402
from reinforge.distributed.ray_rewards import RemoteRewardFn, build_ray_scorer  # noqa: E402
from reinforge.distributed.ray_engine import (  # noqa: E402
    RayEngine,
    WeightSyncError,
    WorkerError,
    WorkerTimeoutError,
    shard_bounds,
    shard_seed,
    state_checksum,
)

CPU = 0.5  # per worker: the N=1 and N=2 engines and a replacement fit in the 2-CPU session together


@pytest.fixture(scope="module")
def ray_session():
    start_ray(None, num_cpus=2)
    yield
    stop_ray()


@pytest.fixture(scope="module")
def model(sharp_nano_model):
    return copy.deepcopy(sharp_nano_model)


@pytest.fixture(scope="module")
def prompts(arithmetic_prompts) -> list[list[int]]:
    return [p for p in arithmetic_prompts for _ in range(3)]  # 15 prompts: shards of 8 and 7


@pytest.fixture(scope="module")
def params(tokenizer) -> SamplingParams:
    return SamplingParams(max_new_tokens=8, temperature=1.0, stop_token_ids=(tokenizer.eos_token_id,))


@pytest.fixture(scope="module")
def engine2(ray_session, model, tokenizer):
    engine = RayEngine(model, tokenizer.pad_token_id, num_workers=2, timeout_s=60, cpus_per_worker=CPU, startup_timeout_s=PROCESS_START_S)
    yield engine
    engine.close()


def as_tuples(generations):
    return [(g.token_ids, g.logprobs, g.finish_reason, g.policy_version) for g in generations]


def test_shards_are_contiguous_and_seeded_per_shard() -> None:
    assert shard_bounds(15, 2) == [(0, 8), (8, 15)]
    assert shard_bounds(2, 4) == [(0, 1), (1, 2)]
    assert shard_seed(7, 0) == 7 and shard_seed(None, 1) is None
    assert shard_seed(7, 1) == shard_seed(7, 1) != shard_seed(7, 2) != 7


def test_one_worker_equals_the_in_process_engine(ray_session, model, tokenizer, prompts, params) -> None:
    local = TorchEngine(model, tokenizer.pad_token_id)
    with RayEngine(model, tokenizer.pad_token_id, num_workers=1, timeout_s=60, cpus_per_worker=CPU, startup_timeout_s=PROCESS_START_S) as remote:
        assert as_tuples(remote.generate(prompts, params, seed=3)) == as_tuples(local.generate(prompts, params, seed=3))
        greedy = SamplingParams(max_new_tokens=8, temperature=0.0)
        assert as_tuples(remote.generate(prompts, greedy)) == as_tuples(local.generate(prompts, greedy))
        assert remote.generate([], params) == []


def test_two_workers_return_every_shard_in_order(engine2, model, tokenizer, prompts, params) -> None:
    out = engine2.generate(prompts, params, seed=5)
    assert len(out) == len(prompts)
    assert {g.policy_version for g in out} == {engine2.policy_version}
    # Shard i is exactly the in-process engine on those prompts with shard i's seed.
    local = TorchEngine(model, tokenizer.pad_token_id)
    expected = [g for i, (a, b) in enumerate(shard_bounds(len(prompts), 2)) for g in local.generate(prompts[a:b], params, seed=shard_seed(5, i))]
    assert as_tuples(out) == as_tuples(expected)
    assert as_tuples(engine2.generate(prompts, params, seed=5)) == as_tuples(out)  # deterministic given the seed
    assert as_tuples(engine2.generate(prompts, params, seed=6)) != as_tuples(out)


def test_sync_ships_new_weights_and_checks_the_echo(engine2, model, tokenizer, prompts, params, monkeypatch) -> None:
    before = engine2.generate(prompts, params, seed=1)
    with torch.no_grad():
        model.lm_head.weight.mul_(1.5)  # tied with the embeddings: a real change of the policy
    try:
        engine2.sync_weights(7)
        after = engine2.generate(prompts, params, seed=1)
        assert engine2.policy_version == 7 and {g.policy_version for g in after} == {7}
        local = TorchEngine(model, tokenizer.pad_token_id)
        local.sync_weights(7)
        assert as_tuples(after[:8]) == as_tuples(local.generate(prompts[:8], params, seed=1))
        assert [g.logprobs for g in after] != [g.logprobs for g in before]

        # Each worker echoes (version, checksum of the weights it now holds).
        state = {k: v.detach() for k, v in model.state_dict().items()}
        actor = engine2.actors()[0]
        assert ray.get(actor.load_weights.remote(state, 7), timeout=30) == (7, state_checksum(state))

        # A checksum that does not match what the workers hold stops the sync.
        monkeypatch.setattr(ray_engine, "state_checksum", lambda state: "not-the-workers-checksum")
        with pytest.raises(WeightSyncError, match="rollout worker 0 echoed weights"):
            engine2.sync_weights(8)
    finally:
        monkeypatch.undo()
        with torch.no_grad():
            model.lm_head.weight.div_(1.5)
        engine2.sync_weights(9)
    assert [g.token_ids for g in engine2.generate(prompts, params, seed=1)] == [g.token_ids for g in before]


def test_a_sync_ships_one_object_per_tensor_and_workers_load_them_one_at_a_time(engine2, model) -> None:
    """No second full state dict on the learner's side: every tensor is an object of its own (tied
    embeddings and head one object), which each worker fetches and loads one at a time, and
    echoes the checksum of what it then holds."""
    engine2.sync_weights(11)
    payload = engine2._held.payload
    state = model.state_dict()
    assert list(payload) == list(state) and all(isinstance(ref, ray.ObjectRef) for ref in payload.values())
    assert payload["lm_head.weight"] == payload["model.embed_tokens.weight"]  # tied: put once
    for name, ref in payload.items():
        assert torch.equal(ray.get(ref, timeout=30), state[name]), name
    assert ray.get(engine2.actors()[1].load_weights.remote(payload, 11), timeout=30) == (11, state_checksum(state))
    wrong = {name: tensor[:1] if name == "lm_head.weight" else tensor for name, tensor in state.items()}
    target = copy.deepcopy(model)
    with pytest.raises(RuntimeError, match=r"lm_head.weight has shape \(1, "):
        ray_engine.load_streamed(target, wrong)
    with pytest.raises(RuntimeError, match=r"missing \['lm_head.weight'\]"):
        ray_engine.load_streamed(target, {k: v for k, v in state.items() if k != "lm_head.weight"})


def test_a_worker_killed_mid_generate_is_replaced_and_the_shard_retried(engine2, tokenizer, prompts) -> None:
    long = SamplingParams(max_new_tokens=96, temperature=1.0)  # no stop token: every row runs 96 steps
    many = prompts * 16
    started = time.monotonic()
    expected = engine2.generate(many, long, seed=11)
    duration = time.monotonic() - started
    replacements = engine2.replacements
    result: list = []
    thread = threading.Thread(target=lambda: result.append(engine2.generate(many, long, seed=11)))
    thread.start()
    time.sleep(min(0.2, duration / 4))
    assert thread.is_alive(), f"generate finished before the kill ({duration:.2f} s); make the batch longer"
    ray.kill(engine2.actors()[1])
    thread.join(timeout=engine2.startup_timeout_s + engine2.timeout_s * 2)  # the replacement starts, then retries
    assert not thread.is_alive()
    assert engine2.replacements == replacements + 1
    assert as_tuples(result[0]) == as_tuples(expected), f"reference run took {duration:.2f} s"  # the retried shard is the same sample


def test_a_worker_whose_replacement_dies_stops_the_call_with_a_clear_error(engine2, prompts, params, monkeypatch) -> None:
    dead = engine2.actors()[0]
    ray.kill(dead)
    monkeypatch.setattr(engine2, "_spawn", lambda: dead)  # the replacement is dead on arrival too
    started = time.monotonic()
    with pytest.raises(WorkerError, match=r"rollout worker 0 died during generate .* and so did its replacement"):
        engine2.generate(prompts, params, seed=1)
    assert time.monotonic() - started < engine2.timeout_s


def test_a_worker_that_never_starts_times_out(ray_session, model, tokenizer) -> None:
    started = time.monotonic()
    with pytest.raises(WorkerTimeoutError, match=r"did not finish weight sync to version 0 within 2 s.*cluster has 2 CPUs"):
        RayEngine(model, tokenizer.pad_token_id, num_workers=1, timeout_s=2, cpus_per_worker=3)  # no node has 3 CPUs
    assert time.monotonic() - started < 15


# ---------------------------------------------------------------------------- reward workers

REWARDS = [  # (name, fn, weight, params): per-sample, group and stateful components
    ("correct", "verifier", 1.0, {}),
    ("format", "format", 0.1, {"pattern": "[0-9]+"}),
    ("vote", "majority_vote", 0.5, {}),
    ("hard", "code_tests_difficulty", 0.0, {}),
]
# on_error=fallback: `hard` fails on every sample here (no tests), and the comparison is of scores.
SCORER = dict(timeout_s=30.0, max_error_fraction=1.0, workers=4, cache=True, on_error="fallback")


def reward_batch():
    tasks = {f"t{i}": Task(id=f"t{i}", prompt=f"{i}+1=", answer=str(i + 1)) for i in range(4)}
    responses = ["1", "1", "2 ", "x", "3", "3", "4", "9", "5", "5", "5", "five"]
    trajectories = [
        single_turn_trajectory(f"t{k // 3}", [1, 2], [5] * len(r), [-0.1] * len(r), r, "stop" if k % 4 else "length", k // 3)
        for k, r in enumerate(responses)
    ]
    return tasks, trajectories


def scored(scorer, batch):
    tasks, trajectories = batch
    metrics = scorer.score(tasks, trajectories)
    metrics.pop("reward_seconds")
    return metrics, [(t.reward, dict(sorted(t.rewards.items())), t.errors) for t in trajectories]


@pytest.fixture(scope="module")
def ray_scorer(ray_session):
    scorer = build_ray_scorer(REWARDS, 2, call_timeout_s=30, start_timeout_s=PROCESS_START_S, cpus_per_worker=0.25, **SCORER)
    yield scorer
    scorer.close()


def test_reward_workers_score_like_the_in_process_scorer(ray_scorer) -> None:
    local = []
    for name, fn, weight, params in REWARDS:
        built, group = build_component(fn, params)
        local.append(NamedReward(name, built, weight, group=group))
    expected = scored(RewardScorer(local, **SCORER), reward_batch())
    assert scored(ray_scorer, reward_batch()) == expected
    kinds = {c.name: type(c.fn) for c in ray_scorer.components}
    assert kinds["correct"] is RemoteRewardFn and kinds["vote"] is RemoteRewardFn
    assert kinds["hard"] is not RemoteRewardFn  # stateful: stays in-process, checkpointed with the run
    assert [c.group for c in ray_scorer.components] == [False, False, True, False]


def test_a_dead_reward_worker_is_replaced(ray_scorer) -> None:
    expected = scored(ray_scorer, reward_batch())
    ray.kill(ray_scorer.pool.actors()[1])
    ray_scorer.cache_enabled = False  # make every component call a worker again
    try:
        assert scored(ray_scorer, reward_batch())[1] == expected[1]
    finally:
        ray_scorer.cache_enabled = True
    assert ray_scorer.pool.replacements == 1


# ---------------------------------------------------------------------------- loopback only

def _descendants(root: int) -> dict[int, str]:
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            names[int(entry.name)] = stat[stat.index("(") + 1 : stat.rindex(")")]
            parents[int(entry.name)] = int(stat[stat.rindex(")") + 2 :].split()[1])
    found, frontier = {root}, [root]
    while frontier:
        pid = frontier.pop()
        children = [p for p, parent in parents.items() if parent == pid and p not in found]
        found.update(children)
        frontier += children
    return {pid: names[pid] for pid in found if pid in names}


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        pass
    return inodes


def _address(hex_address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The address of a /proc/net/{tcp,udp}[6] "local_address" field (hex, 32-bit words in host order)."""
    host = hex_address.split(":")[0]
    words = b"".join(bytes.fromhex(host[i : i + 8])[::-1] for i in range(0, len(host), 8))
    return ipaddress.ip_address(words)


def _is_loopback(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1 on a dual-stack socket
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def _listening(inodes: set[str]) -> list[tuple]:
    """(protocol, local address, port) of every listening TCP / bound UDP socket among `inodes`."""
    out = []
    for proto in ("tcp", "tcp6", "udp", "udp6"):
        path = Path(f"/proc/net/{proto}")
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if inode in inodes and (state == "0A" if proto.startswith("tcp") else True):
                out.append((proto, _address(local), int(local.split(":")[1], 16)))
    return out


def test_the_local_cluster_listens_on_loopback_only(engine2) -> None:
    gc.collect()  # a gloo group of an earlier test (FSDP learners in this process) listens until collected
    processes = _descendants(os.getpid())
    names = set(processes.values())
    assert {"gcs_server", "raylet"} <= names, names  # the Ray processes were found
    sockets = _listening(set().union(*(_socket_inodes(pid) for pid in processes)))
    assert len(sockets) >= 4, sockets  # GCS, raylet, core workers: they do listen, on loopback
    exposed = [s for s in sockets if not _is_loopback(s[1])]
    assert not exposed, f"Ray sockets reachable from outside this machine: {exposed}"
    assert os.environ.get("RAY_AUTH_MODE") == "token"


def test_a_hung_ray_reward_call_is_counted_as_a_timeout_of_its_component(ray_session) -> None:
    # The same reasons as in-process scoring: the actor running a GIL-holding regex is killed and
    # replaced, the sample fails with reason `timeout`, the others are scored.
    scorer = build_ray_scorer([("correct", "verifier", 1.0, {})], 1, call_timeout_s=2, start_timeout_s=PROCESS_START_S,
                              cpus_per_worker=0.25, timeout_s=2, max_error_fraction=1.0, workers=2)
    try:
        tasks = {
            "sum": Task(id="sum", prompt="1+1=", answer="2"),
            "re": Task(id="re", prompt="p", answer="", verifier="regex", metadata={"pattern": "(.*.*.*)*Z"}),
        }
        batch = [single_turn_trajectory(tid, [1], [2], [-0.1], text) for tid, text in [("re", "y" * 30), ("sum", "2")]]
        metrics = scorer.score(tasks, batch)
        assert [t.reward_failures for t in batch] == [{"correct": "timeout"}, {}]
        assert batch[1].rewards == {"correct": 1.0} and metrics["reward_failed/correct/timeout"] == 1.0
        assert scorer.pool.replacements >= 1
        # Evaluation's verifier calls: in local worker processes, under the same timeout.
        outcomes = scorer.verify_responses([tasks["re"], tasks["sum"]], ["y" * 30, "2"])
        assert type(outcomes[0]).__name__ == "RewardTimeout" and outcomes[1] == 1.0
    finally:
        scorer.close()
