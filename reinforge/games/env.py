"""The game env: the Env the trainer holds when `env.type: game`; its games come from the tasks.

Rollout goes through `run_groups` (the seam of reinforge.rollout.episodes.rollout_groups): a
task is one game setup, and its group is `group_size` trajectories, one per policy seat per
game, so a self-play task of a two-player game plays group_size / 2 games. Evaluation goes
through `evaluate_games` (the seam of reinforge.evals.evaluation.evaluate): win / draw / loss
rates against each fixed opponent (reinforge.games.evaluation).

With `task.params.opponent_pool`, a `pool` seat of a training game is played by a frozen past
policy drawn from the pool when the game is set up (reinforge.games.pool); the loop calls
`after_step` after each update (the pool takes its snapshots) and checkpoints `state_dict()`.

Warm-up examples are the tasks' random-legal demonstrations, laid out in tokens as a rollout
lays out the same messages (chat prompt, then each later message as an observation).
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from transformers import PreTrainedTokenizerBase

from reinforge.engines.base import Engine, SamplingParams
from reinforge.envs.chat_game_env import ChatGameEnv
from reinforge.games.game import Game
from reinforge.games.match import MatchRules, new_match
from reinforge.games.play import POLICY, GameRun, play_games
from reinforge.games.pool import POOL, OpponentPool, OpponentPoolSpec, is_member
from reinforge.games.registry import get_game
from reinforge.games.tasks import deal_rng
from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.task import Task


class GameEnvError(ValueError):
    pass


def trainable_players(task: Task) -> tuple[str, ...]:
    """The names of a game task's trainable policies (tasks from before several policies: "policy")."""
    return tuple(task.metadata.get("policies", [POLICY]))


def policy_seats(task: Task) -> int:
    return sum(who in trainable_players(task) for who in task.metadata["seats"])


def games_per_group(task: Task, group_size: int) -> int:
    """Games that fill a group of `group_size` trajectories (one per policy seat per game)."""
    seats = policy_seats(task)
    if seats == 0 or group_size % seats:
        raise GameEnvError(
            f"task {task.id}: rollout.group_size={group_size} is not a multiple of the {seats} policy seats of its games "
            f"({task.metadata['seats']}): each game yields one trajectory per policy seat"
        )
    return group_size // seats


class GameEnv(ChatGameEnv):
    def __init__(self, tokenizer: PreTrainedTokenizerBase, max_turns: int, opponent_pool: OpponentPoolSpec | None = None,
                 seed: int = 0, ratings: bool = False):
        super().__init__(tokenizer, max_turns)
        self._games: dict[str, Game] = {}
        self.pool = OpponentPool(opponent_pool, seed) if opponent_pool is not None else None
        self._frozen = None  # FrozenPlayers, made on first use from the policy engine's model
        self.ratings = ratings  # rate the policy at each evaluation (reinforge.games.ratings)
        self._ratings: dict[tuple[str, tuple[str, ...]], object] = {}

    def checkpoint_ratings(self, game: Game, anchors: list[str]):
        """The rating table of `game` with these fixed opponents as anchors (rated once, then cached)."""
        from reinforge.games.ratings import CheckpointRatings

        key = (game.name, tuple(anchors))
        if key not in self._ratings:
            self._ratings[key] = CheckpointRatings(game, anchors)
        return self._ratings[key]

    # --- the opponent pool (reinforge.games.pool) ---

    def after_step(self, step: int, engine: Engine) -> dict[str, float]:
        """After RL step `step`'s update (the engine holds the new weights): the pool's snapshot, when
        due; returns the pool's metrics (pool/*) for the step's log."""
        if self.pool is None:
            return {}
        if self.pool.due(step):
            self.pool.snapshot(step, engine.model)
        loads = float(self._frozen.loads) if self._frozen is not None else 0.0
        if self._frozen is not None:
            self._frozen.loads = 0
        return {**self.pool.metrics(), "pool/weight_loads": loads}  # this step's loads of members' weights

    def state_dict(self) -> dict | None:
        return {"opponent_pool": self.pool.state_dict()} if self.pool is not None else None

    def load_state_dict(self, state: dict | None) -> None:
        if self.pool is not None and state is not None:
            self.pool.load_state_dict(state["opponent_pool"])

    def seat_pool_members(self, runs: list[GameRun], engine: Engine) -> dict | None:
        """Each `pool` seat gets a member drawn now; returns the members' engines (None without a pool)."""
        if self.pool is None or not any(POOL in run.players for run in runs):
            return None
        from reinforge.games.frozen_players import FrozenPlayers

        if not self.pool.members:  # the first training game: the warm start is the first member
            self.pool.snapshot(0, engine.model)
        if self._frozen is None:
            self._frozen = FrozenPlayers(self.pool, engine)
        for run in runs:
            for seat, who in enumerate(run.players):
                if who == POOL:
                    run.players[seat] = self.pool.choose()
            run.__post_init__()  # the frozen seats' token streams
        return self._frozen.engines()

    def game(self, name: str) -> Game:
        if name not in self._games:
            self._games[name] = get_game(name)
        return self._games[name]

    # --- the Env protocol ---

    def episode(self):
        raise GameEnvError("a game is played by GameEnv.run_groups (several players per episode), not one episode at a time")

    # --- games ---

    def new_run(self, task: Task, group_id: int, rng_seed: str) -> GameRun:
        meta = task.metadata
        game = self.game(meta["game"])
        rng = random.Random(rng_seed)
        # A game dealt per task (describer_guesser's secret) deals every game of a group alike, so the
        # group compares answers to one question; the fixed players' randomness stays per game.
        deal = deal_rng(task) if game.deal_per_task else rng
        rules = MatchRules(float(meta["draw_reward"]), int(meta["max_illegal_moves"]), self.max_turns)
        return GameRun(task, group_id, list(meta["seats"]), new_match(game, rules, deal), rng,
                       policies=trainable_players(task))

    def new_group(self, task: Task, group_id: int, group_size: int, tag: str, engine: Engine) -> list[GameRun]:
        """The games of one group of `task`, set up (pool seats drawn) but not started: partial
        rollouts play them over several rounds (reinforge.games.partial_play)."""
        runs = [
            self.new_run(task, group_id, f"{task.metadata['game_seed']}-{tag}-{k}")
            for k in range(games_per_group(task, group_size))
        ]
        self.seat_pool_members(runs, engine)
        return runs

    def play(
        self, engine: Engine | Mapping[str, Engine], tasks: list[Task], games: list[int], params: SamplingParams, seed: int | None,
        first_group_id: int, max_episode_tokens: int | None, tag: str, decode_hook=None,
    ) -> tuple[list[GameRun], int]:
        """`games[i]` games of task i (group id first_group_id + i), all played together; `engine`
        may map each trainable policy to its own engine (reinforge.games.play.play_games). The
        opponents' randomness and the deals depend on the task's seed, `tag`, `seed` and the game's
        index, so an evaluation (fixed seed) meets the same opponent play every time. Returns the
        runs and the oldest policy version that sampled in them. `decode_hook`: rollout pruning's
        (reinforge.games.play); a pruned game is "unfinished", which the pool does not count."""
        runs = [
            self.new_run(task, first_group_id + i, f"{task.metadata['game_seed']}-{tag}-{seed}-{k}")
            for i, task in enumerate(tasks)
            for k in range(games[i])
        ]
        frozen = self.seat_pool_members(runs, engine)
        hook = {} if decode_hook is None else {"decode_hook": decode_hook}
        version = play_games(engine, self.chat, self.decode_response, runs, params, seed, max_episode_tokens, frozen, **hook)
        if frozen is not None:
            for run in runs:
                self.record_pool_result(run)
        return runs, version

    def record_pool_result(self, run: GameRun) -> None:
        """The policy's outcome against each pool member seated in the finished game `run`."""
        policy = run.players.index(POLICY)
        for who in run.players:
            if is_member(who):
                self.pool.record(who, run.match.outcome(policy))

    def frozen_engine(self, name: str, engine: Engine) -> Engine:
        """The engine of pool member `name` (retired or not), through the lane of `engine`'s model."""
        from reinforge.games.frozen_players import FrozenPlayers

        if self._frozen is None:
            self._frozen = FrozenPlayers(self.pool, engine)
        return self._frozen.engine(name)

    def partial_rounds(self, max_episode_tokens: int | None, env_workers: int):
        """Partial rollouts of games (trainer.partial_rollouts; reinforge.games.partial_play)."""
        from reinforge.games.partial_play import GameRounds

        return GameRounds(self, max_episode_tokens)

    def run_groups(
        self, engine: Engine | Mapping[str, Engine], tasks: list[Task], group_size: int, params: SamplingParams, seed: int | None,
        first_group_id: int = 0, max_episode_tokens: int | None = None, decode_hook=None,
    ) -> list[Trajectory]:
        """Trajectories in task order, `group_size` per task (each game's policy seats in seat order);
        a game rollout pruning stopped gives its seats' trajectories with finish reason "pruned"."""
        games = [games_per_group(task, group_size) for task in tasks]
        runs, version = self.play(engine, tasks, games, params, seed, first_group_id, max_episode_tokens, "train", decode_hook)
        if isinstance(engine, Mapping):  # a seat that never moved: its own policy's version, not another's (a policy
            version = {name: own.policy_version for name, own in engine.items()}  # that sat out a step is a version behind)
        return [trajectory for run in runs for trajectory in run.trajectories(self.chat, version)]

    def evaluate_games(self, engine: Engine | Mapping[str, Engine], tasks: list[Task], max_new_tokens: int, samples: int, temperature: float,
                       seed: int, max_episode_tokens: int | None = None) -> tuple[dict[str, float], list[dict]]:
        from reinforge.games.evaluation import evaluate_games

        return evaluate_games(self, engine, tasks, max_new_tokens, samples, temperature, seed, max_episode_tokens)
