"""TRL's multi-turn hook: a crucible episode per rollout, as GRPOTrainer's `environment_factory`.

TRL (>= 1.0) builds one environment per rollout from `environment_factory`, calls its `reset`
with the dataset row, exposes its public methods to the model as tools, and, when the class
has `get_reward`, adds that as a reward source. Here:

    from trl import GRPOConfig, GRPOTrainer
    from crucible_client.trl_env import make_trl_environment, trl_dataset_rows

    environments = make_trl_environment("tcp://127.0.0.1:5555", max_steps=4)
    dataset = Dataset.from_list(trl_dataset_rows("tcp://127.0.0.1:5555", ["llm/rms_norm"]))
    trainer = GRPOTrainer(model=..., args=GRPOConfig(...), train_dataset=dataset,
                          environment_factory=environments)

`reset(**row)` opens an episode on the row's task and returns a line telling the model how
to submit (appended by TRL to the prompt). The one tool, `submit_kernel(source)`, steps the
episode and returns the feedback (`prompts.render_feedback`): compile errors at the agent's
lines, failing cases, the speedup. That text is the next turn the model reads. `get_reward()`
is the episode's best reward (or the last step's), None when every step was an infra_error
(the server's fault, not the policy's: TRL turns None into NaN and leaves it out), and the
preset's `invalid_action` penalty when the model never submitted. TRL itself is not imported:
the class only has the shape TRL reads. Instances are used by one rollout at a time and share
the factory's thread-safe Client.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from . import wire
from .adapters import _INFRA_CODES, NO_SOURCE_PLACEHOLDER
from .client import DEFAULT_TIMEOUT_S, Client
from .errors import CrucibleError, EpisodeDone, UnknownEpisode
from .pool import Pool, Target, connect
from .prompts import NoSourceFound, extract_source, render_feedback, render_prompt

__all__ = [
    "DEFAULT_INSTRUCTIONS",
    "CrucibleEnvironmentFactory",
    "KernelEpisode",
    "make_trl_environment",
    "trl_dataset_rows",
]

DEFAULT_INSTRUCTIONS = (
    "\n\nYou have {max_steps} attempts. Submit each complete kernel source with the "
    "submit_kernel tool; it answers with the server's feedback (compile errors, failing cases, "
    "timings). Your best attempt is scored."
)

# A reset tag: one map, or a function of the dataset row returning one.
RowTag = Union[wire.Tag, Callable[[Mapping[str, Any]], Optional[wire.Tag]], None]


class KernelEpisode:
    """One rollout's crucible episode. TRL calls `reset(**row)`, the model calls
    `submit_kernel(source)` as a tool, and TRL calls `get_reward()` when the rollout ends.

    Every other member is private or a plain attribute: TRL offers each public method of the
    class to the model as a tool. `attempts` lists one map per submission: `{step, status,
    reward, infra, speedup, feedback}` (`step` None when the server never answered).
    """

    def __init__(self, factory: "CrucibleEnvironmentFactory") -> None:
        self._factory = factory
        self._client: Optional[Union[Client, Pool]] = None
        self._episode: Optional[str] = None
        self._done = False
        self._last_reply: Optional[Dict[str, Any]] = None
        self.task_id: Optional[str] = None
        self.max_steps: Optional[int] = None
        self.reset_reply: Optional[Dict[str, Any]] = None
        self.attempts: List[Dict[str, Any]] = []
        self.closed_reply: Optional[Dict[str, Any]] = None

    def reset(self, **row: Any) -> Optional[str]:
        """Opens an episode on the row's task (the factory's `task`, else `row[task_field]`);
        returns the text TRL appends to the prompt: the task's prompt when the factory renders
        one, then the instructions (None when there is neither)."""
        factory = self._factory
        self._close_episode()
        task = factory.task if factory.task is not None else row.get(factory.task_field)
        if not task:
            raise KeyError(f"no '{factory.task_field}' in the dataset row: add the task id "
                           "under that name, or pass task=... to make_trl_environment")
        self._client = factory._client()
        row_tag = factory.tag(row) if callable(factory.tag) else factory.tag
        seed = factory.seed if factory.seed is not None else row.get("seed")
        reply = wire.body(self._client.request(
            "reset", task=str(task), seed=seed, max_steps=factory.max_steps,
            reward=dict(factory.reward) if factory.reward else None, tag=wire.merge_tags(row_tag),
            timeout=factory.timeout))
        self._episode = str(reply["episode"])
        self._done = False
        self._last_reply = None
        self.task_id = str(task)
        self.max_steps = int(reply.get("max_steps") or 0) or None
        self.reset_reply = reply
        self.attempts = []
        self.closed_reply = None
        parts: List[str] = []
        if factory.prompt is not None:
            parts.append(render_prompt(reply.get("task") or {}, **dict(factory.prompt)))
        if factory.instructions:
            parts.append(factory.instructions.format(max_steps=self.max_steps or "several"))
        return "".join(parts) or None

    def submit_kernel(self, source: str) -> str:
        """Compiles, checks and times one CUDA kernel on the task; returns the server's feedback.

        Args:
            source: The complete CUDA C++ source of the kernel, with its `// @launch` directives.
        """
        if self._episode is None or self._client is None:
            return "No episode is open: nothing was submitted."
        if self._done:
            return (f"The episode is over: all {self.max_steps} attempts are used. "
                    f"{self._best_text()}")
        text = _source_of(source)
        try:
            reply = self._client.request("step", episode=self._episode, source=text,
                                         timeout=self._factory.timeout)
        except EpisodeDone:
            self._done = True
            return f"The episode is over: no attempts are left. {self._best_text()}"
        except CrucibleError as exc:
            infra = exc.code in _INFRA_CODES
            feedback = (f"The server could not score this attempt ({exc.message or exc.code}); "
                        "it does not count. Submit it again." if infra else
                        f"The attempt was refused: {exc.message or exc.code}")
            self.attempts.append({"step": None, "status": "infra_error" if infra else exc.code,
                                  "reward": None, "infra": infra, "speedup": None,
                                  "feedback": feedback})
            return feedback
        self._last_reply = reply
        result = reply.get("result") or {}
        infra = bool((result.get("reward") or {}).get("infra")) or \
            result.get("status") == "infra_error"
        self._done = bool(reply.get("terminated")) or bool(reply.get("truncated"))
        attempt = {"step": reply.get("step"), "status": result.get("status"),
                   "reward": None if infra else float(reply.get("reward", 0.0)),
                   "infra": infra, "speedup": result.get("speedup"), "feedback": ""}
        self.attempts.append(attempt)
        feedback = render_feedback(reply, source=text, max_chars=self._factory.feedback_chars)
        attempt["feedback"] = feedback = feedback.rstrip("\n") + "\n" + self._budget_text()
        return feedback

    def get_reward(self) -> Optional[float]:
        """The rollout's reward: the episode's best (or last, `reward_from="last"`) scored
        step; None when every attempt was an infra_error; the preset's penalty for a model
        that submitted nothing. Closes the episode."""
        try:
            return self._reward()
        finally:
            self._close_episode()

    # -- private ----------------------------------------------------------------------------
    def _reward(self) -> Optional[float]:
        scored = [a for a in self.attempts if not a["infra"] and a["step"] is not None]
        if scored:
            if self._factory.reward_from == "last":
                return float(scored[-1]["reward"])
            best = (self._last_reply or {}).get("best")
            if isinstance(best, Mapping) and isinstance(best.get("reward"), (int, float)):
                return float(best["reward"])
            return max(float(a["reward"]) for a in scored)
        if self.attempts:
            return None  # every attempt was the server's failure
        if self._factory.no_submission_reward is not None:
            return float(self._factory.no_submission_reward)
        if self._episode is None:
            return None
        # Nothing was submitted: score the placeholder, which declares no kernel, so the
        # server answers invalid_action with the preset's own penalty.
        self.submit_kernel(NO_SOURCE_PLACEHOLDER)
        last = self.attempts[-1] if self.attempts else None
        return None if last is None or last["reward"] is None else float(last["reward"])

    def _budget_text(self) -> str:
        if self._done:
            return f"No attempts left. {self._best_text()}"
        used = sum(1 for a in self.attempts if not a["infra"] and a["step"] is not None)
        if self.max_steps is None:
            return ""
        left = max(self.max_steps - used, 0)
        return f"{left} attempt{'s' if left != 1 else ''} left."

    def _best_text(self) -> str:
        best = (self._last_reply or {}).get("best")
        if isinstance(best, Mapping) and best.get("reward") is not None:
            return f"Best: step {best.get('step')}, {best.get('status')}, reward {best['reward']}."
        return "No attempt was scored."

    def _close_episode(self) -> None:
        episode, self._episode = self._episode, None
        if episode is None or self._client is None:
            return
        try:
            self.closed_reply = wire.body(self._client.request("close", episode=episode,
                                                               timeout=self._factory.timeout))
        except UnknownEpisode:
            pass  # it expired on the server: nothing left to close
        except CrucibleError:
            pass  # the server closes idle episodes itself; the reward is already known


def _source_of(text: str) -> str:
    """The kernel in a tool argument: the fenced block when the model fenced it, else the
    text itself; the placeholder for an empty one (the server refuses an empty source)."""
    if "```" in text:
        try:
            return extract_source(text)
        except NoSourceFound:
            pass
    return text if text.strip() else NO_SOURCE_PLACEHOLDER


class CrucibleEnvironmentFactory:
    """`environment_factory` for GRPOTrainer: calling it makes a KernelEpisode; every episode
    it made shares one Client (opened on first use; `close()` closes it).

    `episodes` lists the instances made, in order (TRL keeps a pool and reuses them).
    """

    def __init__(
        self,
        server: Target = wire.DEFAULT_ENDPOINT,
        *,
        task: Optional[str] = None,
        task_field: str = "task",
        max_steps: Optional[int] = 4,
        reward: Optional[Mapping[str, Any]] = None,
        seed: Optional[int] = None,
        tag: RowTag = None,
        instructions: Optional[str] = DEFAULT_INSTRUCTIONS,
        prompt: Optional[Mapping[str, Any]] = None,
        feedback_chars: Optional[int] = 6000,
        reward_from: str = "best",
        no_submission_reward: Optional[float] = None,
        timeout: Optional[float] = None,
    ) -> None:
        if reward_from not in ("best", "last"):
            raise ValueError("reward_from must be 'best' or 'last'")
        if tag is not None and not callable(tag):
            wire.check_tag(tag)
        self.server = server
        self.task = task
        self.task_field = task_field
        self.max_steps = max_steps
        self.reward = reward
        self.seed = seed
        self.tag = tag
        self.instructions = instructions
        self.prompt = prompt
        self.feedback_chars = feedback_chars
        self.reward_from = reward_from
        self.no_submission_reward = no_submission_reward
        self.timeout = timeout
        self.episodes: List[KernelEpisode] = []
        self._lock = threading.Lock()
        self._own: Optional[Union[Client, Pool]] = None

    def __call__(self) -> KernelEpisode:
        episode = KernelEpisode(self)
        with self._lock:
            self.episodes.append(episode)
        return episode

    def _client(self) -> Union[Client, Pool]:
        if isinstance(self.server, (Client, Pool)):
            return self.server
        with self._lock:
            if self._own is None or self._own.closed:
                self._own = connect(self.server, timeout=self.timeout or DEFAULT_TIMEOUT_S)
            return self._own

    def close(self) -> None:
        """Closes the episodes still open and the factory's own Client."""
        for episode in list(self.episodes):
            episode._close_episode()
        with self._lock:
            if self._own is not None:
                self._own.close()
            self._own = None


def make_trl_environment(
    server: Target = wire.DEFAULT_ENDPOINT,
    *,
    task: Optional[str] = None,
    task_field: str = "task",
    max_steps: Optional[int] = 4,
    reward: Optional[Mapping[str, Any]] = None,
    seed: Optional[int] = None,
    tag: RowTag = None,
    instructions: Optional[str] = DEFAULT_INSTRUCTIONS,
    prompt: Optional[Mapping[str, Any]] = None,
    feedback_chars: Optional[int] = 6000,
    reward_from: str = "best",
    no_submission_reward: Optional[float] = None,
    timeout: Optional[float] = None,
) -> CrucibleEnvironmentFactory:
    """The `environment_factory` for `GRPOTrainer`: one crucible episode per rollout.

    `server` is an endpoint (one Client is opened on first use), several (a list or a
    comma-separated string: a Pool, each episode kept on its server), or a Client or Pool. The
    task id is `task` for every row, else the row's `task_field` column; `seed` (else the
    row's `seed`), `max_steps` and `reward` (a reward spec) go to every reset. `tag` labels
    each episode in the server's log: a map, or `f(row) -> map`. `instructions` is appended to
    the prompt by TRL (`{max_steps}` is filled in; None appends nothing); with `prompt`
    (options for `render_prompt`, e.g. `{"style": "compact", "max_chars": 8000}`) the task's
    own prompt is appended first, for datasets that carry only task ids. `feedback_chars` bounds each tool
    answer. `reward_from` is "best" (the server's best step) or "last". A rollout that never
    submits scores the preset's invalid_action penalty unless `no_submission_reward` is set.
    """
    return CrucibleEnvironmentFactory(
        server, task=task, task_field=task_field, max_steps=max_steps, reward=reward, seed=seed,
        tag=tag, instructions=instructions, prompt=prompt, feedback_chars=feedback_chars,
        reward_from=reward_from, no_submission_reward=no_submission_reward, timeout=timeout)


def trl_dataset_rows(
    server: Target,
    tasks: Sequence[str],
    *,
    conversational: bool = True,
    system: Optional[str] = None,
    repeat: int = 1,
    **prompt_options: Any,
) -> List[Dict[str, Any]]:
    """Dataset rows for GRPOTrainer, one per task (times `repeat`): `{"prompt", "task"}`.

    The prompt is `render_prompt(task view, hello=..., **prompt_options)`, as a user message
    list (`conversational`, with an optional `system` message) or a string.
    `datasets.Dataset.from_list(rows)` makes the dataset.
    """
    client = connect(server)
    try:
        hello = wire.body(client.request("hello", client="crucible_client.trl_env"))
        options = dict(prompt_options)
        options.setdefault("hello", hello)
        rows: List[Dict[str, Any]] = []
        for task in tasks:
            view = client.request("task", task=task)["task"]
            text = render_prompt(view, **options)
            prompt: Any = text
            if conversational:
                prompt = ([{"role": "system", "content": system}] if system else []) + \
                    [{"role": "user", "content": text}]
            rows.extend({"prompt": prompt, "task": task} for _ in range(max(1, repeat)))
        return rows
    finally:
        if client is not server:
            client.close()
