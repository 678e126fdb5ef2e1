"""The all-sync DAPO loop: rollout, dynamic-sampling refill, update, adapter sync.

One step::

    rollout   every env at once through the batching engine; rewards are computed by
              the envs as their episodes end, while other episodes still generate
    refill    drop groups whose rewards are all equal; draw more tasks until the batch
              holds ``batch_tasks`` informative groups (at most max_generation_rounds)
    reward    shaping (overlong, length reward) and group advantages
    train     DAPO loss over every policy token, micro-batched; optimizer step(s)
    sync      the new adapter goes to the engine (a no-op for the embedded engine,
              which shares the model object)

A colocated engine that holds its own weights (vLLM) wakes before the rollout and
sleeps before the update, so training gets its memory back (``wake``/``sleep`` phases
of the timeline).

Strictly on-policy: the next rollout starts only after the sync.

Departures from the textbook DAPO (arXiv 2503.14476), on purpose:

1. One optimizer step per batch by default (``updates_per_batch: 1``). The policy has
   not moved since sampling, so the ratio is exactly 1, clipping never binds and the
   surrogate's gradient equals the policy gradient; with ``updates_per_batch > 1`` the
   batch is split into mini-batches and clip-higher does its job as in the paper.
2. Old log-probs are recomputed by the learner (when needed), not taken from the
   engine; the engine's are only compared with them (``charts/logprob_mismatch``), so a
   numerically different engine (vLLM) cannot bias the ratio.
3. Episodes, not responses, are the unit of a group: one advantage per episode,
   broadcast to every token the policy produced in every conversation of the episode
   (memory summaries included). Environment text is never trained on.
4. The group std is the unbiased (n-1) one; a group of one gets advantage 0.
5. Dynamic sampling keeps the first ``batch_tasks`` informative groups in draw order and
   drops the surplus; after ``max_generation_rounds`` it trains on what it has (or
   skips/errors, ``on_cap``) rather than looping forever.
6. Overlong shaping judges an episode by its longest completion against
   ``rollout.max_tokens``; overlong masking drops any episode with a truncated
   completion.
7. LoRA instead of full fine-tuning; the KL reference is the base model (adapter off).
8. No entropy bonus; entropy is only logged.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from agentgym import (
    Progress,
    RayEnvWorkers,
    SamplingParams,
    derive_seed,
    failed_attempts,
    save_config,
)
from agentgym.generation import AdapterSync, RolloutEngine, make_engine, routed_experts
from agentgym.health import (
    LAUNCHER_ENV,
    IntervalTotal,
    RankHeartbeat,
    RunLock,
    RunStopped,
    WorkerMonitor,
    held_by_launcher,
)
from agentgym.trainers import apo, failures
from agentgym.trainers.checkpointer import Checkpointer
from agentgym.trainers.config import TrainConfig
from agentgym.trainers.critic_pretrain import pretrain_critic
from agentgym.trainers.distributed import all_gather_objects, start_distributed
from agentgym.trainers.env_setup import env_kwargs, resolve_envs
from agentgym.trainers.evaluation import eval_metrics, evaluate_async
from agentgym.trainers.learner import weights_for
from agentgym.trainers.logging import (
    JsonlWriter,
    SampleLog,
    plot_run,
    progress_stats,
    start_tracking,
    write_summary,
)
from agentgym.trainers.metric_keys import check_row
from agentgym.trainers.model_setup import build_policy_model
from agentgym.trainers.rollout_phase import RolloutPhase
from agentgym.trainers.runtime import setup_torch
from agentgym.trainers.steps import GroupSteps, StepKind
from agentgym.trainers.stopping import (
    GO_ON,
    STOP_AFTER_CHECKPOINT,
    PoliteSignals,
    agreed_stop,
)
from agentgym.trainers.strategies import make_learner
from agentgym.trainers.timeline import Timeline
from agentgym.trainers.tppo import TruncatedSteps


class DAPOTrainer:
    """All-sync DAPO with LoRA on one process or many (see the module docstring).

    With ``distributed.strategy`` ``deepspeed`` or ``fsdp2`` (under torchrun), every
    rank builds the same model, rolls out its share of each step's tasks with the full
    weights gathered, receives every rank's episodes (so every rank makes the same
    dynamic-sampling decisions and sees the same batch), and trains on its share of the
    micro-batches; rank 0 writes the logs, plots and checkpoint metadata.

    Args:
        config: the run's :class:`~agentgym.trainers.config.TrainConfig`.
        resume: continue from the run directory's latest checkpoint.
        engine: a rollout engine; default the one ``rollout.engine`` names (the HF
            engine sharing the model, or vLLM), built by
            :func:`~agentgym.generation.make_engine`.
    """

    def __init__(
        self, config: TrainConfig, *, resume: bool = False, engine: RolloutEngine | None = None
    ) -> None:
        self.cfg = cfg = config
        self.dist = start_distributed(cfg.distributed, lora=cfg.lora.enabled)
        self.out = Path(cfg.run.output_dir)
        # one run per run folder: rank 0 holds the lock unless its launcher holds it
        self.run_lock: RunLock | None = None
        if self.dist.rank == 0 and not held_by_launcher(self.out):
            self.run_lock = RunLock(self.out).acquire()
        self.heartbeat: RankHeartbeat | None = None
        #: a SIGTERM / SIGINT while it trains: stop after the step, with a checkpoint
        self.signals = PoliteSignals(self._say, lambda: self.step)
        self.worker_monitor: WorkerMonitor | None = None
        try:
            self._build(cfg, resume, engine)
        except BaseException:
            self.close()
            raise

    def _build(self, cfg: TrainConfig, resume: bool, engine: RolloutEngine | None) -> None:
        """The rest of ``__init__``: model, learner, engine, rollouts, resume."""
        if self.dist.distributed and cfg.health.enabled:  # the launcher's detector reads it
            self.heartbeat = RankHeartbeat(
                self.out,
                rank=self.dist.rank,
                world_size=self.dist.world_size,
                local_rank=self.dist.local_rank,
                interval_s=cfg.health.heartbeat_s,
                gen_seconds=self._generating_seconds,
                tokens=lambda: float(getattr(self.__dict__.get("engine"), "generated_tokens", 0)),
            )
        setup_torch(cfg.run.threads, cfg.run.seed)
        self.env_ids = resolve_envs(cfg.envs)
        self.out.mkdir(parents=True, exist_ok=True)
        # A*PO: the prompts' optimal values come from an offline stage, run first
        self.apo_values = (
            apo.ensure_values(cfg, world_size=self.dist.world_size, say=self._say)
            if cfg.algorithm.advantage == "apo"
            else None
        )

        model, self.tokenizer = build_policy_model(cfg, self.dist, self._say)
        self.model = model
        pad = (
            self.tokenizer.pad_token_id
            if self.tokenizer.pad_token_id is not None
            else self.tokenizer.eos_token_id
        )
        # the engine first: vLLM reads the base weights and the adapter's config from the
        # model the loop built, which the mesh learner then cuts into this rank's share
        self.engine = engine or make_engine(
            cfg.rollout.engine,
            model=model,
            tokenizer=self.tokenizer,
            seed=cfg.run.seed,
            model_path=cfg.model.path,
            workdir=self.out / "engine",
            options=cfg.rollout.engine_settings,
            rank=self.dist.rank,
            world_size=self.dist.world_size,
            job=os.environ.get("MASTER_PORT"),
        )
        self.learner = make_learner(model, cfg, self.dist, pad_id=int(pad))
        #: the adapter from the learner to an engine that holds its own weights (vLLM)
        self.sync = (
            AdapterSync(self.engine, num_experts=routed_experts(model))
            if cfg.lora.enabled and not self.engine.shares_weights
            else None
        )
        self.engine.record_routing = cfg.algorithm.router_replay  # MoE: the learner replays it
        self.policy = self.engine.as_policy(
            max_batch=cfg.rollout.max_batch, gather_window_s=cfg.rollout.gather_window_s
        )
        self.rollouts = RolloutPhase(
            cfg,
            self.env_ids,
            [env_kwargs(spec, self.tokenizer) for spec in cfg.envs],
            self.dist,
            self.engine,
        )
        if isinstance(self.rollouts.env_host, RayEnvWorkers) and cfg.health.enabled:
            self.worker_monitor = WorkerMonitor(
                self.rollouts.env_host,
                cfg.health.detector_settings(),
                action=cfg.health.workers,
                run_dir=self.out,
                interval_s=cfg.health.heartbeat_s,
                rank=self.dist.rank,
            )
        self.steps: StepKind = self._step_kind()
        self.step = 0
        #: what a checkpoint holds: the learner, the RNGs, the step, and the parts
        #: registered here (the task stream with its quarantine; the step kind's state,
        #: T-PPO's responses in flight)
        self.checkpoints = Checkpointer(
            self.out / "checkpoints",
            self.learner,
            model,
            keep=cfg.run.keep_checkpoints,
            dist=self.dist,
            say=lambda msg: self._say(f"[agentgym train] {msg}"),
        )
        self.checkpoints.register("tasks", self.rollouts)
        self.checkpoints.register("step_kind", self.steps)
        self.origin = time.monotonic()

        self.resumed_from = self._resume() if resume else None
        if self.sync is not None:
            # the first rollout samples the learner's adapter (after a resume: the checkpoint's),
            # not the one the engine was built with
            self.sync.push(self.learner)
        self._open_logs(resume)
        self.initial_adapter_digest = self.adapter_digest() if cfg.lora.enabled else None

    def _resume(self) -> Path | None:
        """Continue from the run folder's newest intact checkpoint: every registered part
        (:attr:`checkpoints`), then the quarantined tasks recorded since. Returns the
        checkpoint, or None (with a message) when there is none."""
        ckpt = self.checkpoints.find()
        if ckpt is None:
            return None
        self.step = self.checkpoints.restore(ckpt)
        # tasks that failed after the checkpoint was written are in the run folder's record
        self.rollouts.tasks.quarantine(
            failures.read_quarantine(self.out / failures.QUARANTINE_FILE)
        )
        return ckpt

    def _open_logs(self, resume: bool) -> None:
        """The run's JSONL logs (on resume, the rows after the checkpoint's step are
        dropped: they are redone), its config.yaml, TensorBoard / W&B (rank 0 writes)."""
        cfg = self.cfg
        main, after = self.dist.is_main, self.step if resume else -1  # rows after: redone
        strict = os.environ.get("AGENTGYM_STRICT_METRICS") == "1"  # every key in the table
        self.metrics_log = JsonlWriter(
            self.out / "metrics.jsonl",
            truncate_after_step=after,
            enabled=main,
            check=check_row if strict else None,
        )
        self.timeline_log = JsonlWriter(
            self.out / "timeline.jsonl", truncate_after_step=after, enabled=main
        )
        self.samples_log = SampleLog(
            self.out / "samples.jsonl",
            cfg.run.sample_episodes,
            truncate_after_step=after,
            enabled=main,
        )
        if main:
            save_config(cfg, self.out / "config.yaml")
        start_tracking(cfg, self.out, self.metrics_log, self.timeline_log, enabled=main)

    def close(self) -> None:
        """Stop the policy and the engine; close the envs kept for reuse and the workers;
        stop the heartbeat and give the run folder's lock back."""
        self._close_parts()
        if self.run_lock is not None:
            self.run_lock.release()

    def _close_parts(self, *, heartbeat: bool = True) -> None:
        if self.worker_monitor is not None:
            self.worker_monitor.close()
        for part in ("policy", "steps", "engine", "rollouts"):
            if self.__dict__.get(part) is not None:
                getattr(self, part).close()
        if heartbeat and self.heartbeat is not None:
            self.heartbeat.close()

    def _generating_seconds(self) -> float:
        """Seconds the engine has spent generating (read by the heartbeat thread)."""
        engine = self.__dict__.get("engine")
        if engine is None:
            return 0.0
        counter = self.__dict__.get("_busy_total")
        if counter is None or counter.intervals is not engine.busy:
            counter = self._busy_total = IntervalTotal(engine.busy)
        return counter()

    def _phase(self, name: str) -> None:
        if self.heartbeat is not None:
            self.heartbeat.phase(name)

    def _stop_requested(self) -> int:
        """Whether to stop after this step (:func:`~.stopping.agreed_stop`): the launcher
        asks when it found a faulty rank, a SIGTERM / SIGINT to stop after a checkpoint."""
        local = STOP_AFTER_CHECKPOINT if self.signals.signum else GO_ON
        launched = self.heartbeat is not None and os.environ.get(LAUNCHER_ENV)
        if launched and not local:
            local = self.heartbeat.stop_requested()
        return agreed_stop(local, self.dist, collective=bool(launched) or self.dist.distributed)

    # ------------------------------------------------------------------ one step
    def _step_kind(self) -> StepKind:
        """What this run's algorithm plugs into :meth:`train_step`: T-PPO's truncated
        rollouts (``rollout.truncate_window``) or DAPO's groups (PPO, VAPO, A*PO too)."""
        if self.cfg.rollout.truncate_window:
            return TruncatedSteps(
                self.cfg,
                self.rollouts,
                self.engine,
                self.learner,
                self.tokenizer,
                env_ids=self.env_ids,
                dist=self.dist,
            )
        return GroupSteps(
            self.cfg,
            self.rollouts,
            self.policy,
            self.learner,
            self.tokenizer,
            apo_values=self.apo_values,
            say=self._say,
        )

    def pretrain_critic(self) -> list[dict[str, float]]:
        """VAPO's value pretraining (:func:`~.critic_pretrain.pretrain_critic`), its
        rows in ``critic_pretrain.jsonl`` (a restarted pretraining starts it again) and
        returned. :meth:`train` runs it before the first step."""
        log = JsonlWriter(
            self.out / "critic_pretrain.jsonl", truncate_after_step=-1, enabled=self.dist.is_main
        )
        return pretrain_critic(
            self.cfg,
            self.learner,
            self.rollouts,
            self.policy,
            self.tokenizer,
            log=log,
            say=self._say,
            progress=self.cfg.run.progress and self.dist.is_main,
            weights=lambda: weights_for(self.engine, self.learner),
        )

    def train_step(self) -> dict[str, Any]:
        """One all-sync step, its phases in order (each timed on the timeline): the
        engine wakes, generates (the weights gathered for it), sleeps; the step kind
        (:attr:`steps`) scores the episodes and trains on them; the new adapter goes to
        the engine. Strictly on-policy: the next rollout starts after the sync."""
        tl = Timeline()
        if self.heartbeat is not None:
            self.heartbeat.step_started()
        with tl.phase("wake"):
            self.engine.wake()  # a colocated engine (vLLM) takes its memory back
        with tl.phase("rollout"), tl.watch(self.engine), weights_for(self.engine, self.learner):
            rollout = self.steps.rollout(self.step)
        with tl.phase("reward"):
            scored = self.steps.score(rollout)
        self._record_failures(rollout.failed, scored.played, rollout.played)
        self._phase("train")
        with tl.phase("sleep"):
            self.engine.sleep()  # and gives it to training
        with tl.phase("train"):
            trained = self.steps.train(scored)
        self._phase("sync")
        synced = None
        with tl.phase("sync"):
            if not scored.skip and self.sync is not None:
                synced = self.sync.push(self.learner)
        self.step += 1
        m = {"step": self.step, **self.steps.metrics(rollout, scored, trained), **tl.metrics()}
        if synced is not None:  # this rank's bytes (rank 0 writes the row)
            m.update(
                {
                    f"sync/{k}_bytes": getattr(synced, k)
                    for k in ("held", "served", "sent", "received")
                }
            )
        for row in tl.to_records(self.step, self.origin):
            self.timeline_log.write(row)
        self.samples_log.write_step(self.step, scored.played, scored.trained, scored.rewards)
        return m

    def _record_failures(self, failed: list[Any], scored: list[Any], played: int) -> None:
        """Episodes that failed after their retries, and those scored after a retry:
        ``failures.jsonl``; the run stops when too large a share of the step's episodes
        failed."""
        recovered = [ep for ep in scored if failed_attempts(ep)]
        if not (failed or recovered):
            return
        if self.dist.is_main:
            self._say(failures.record(self.out, self.step + 1, failed, recovered))
        failures.check_share(
            self.step + 1, failed, played, self.cfg.rollout.max_failed_share, self.out
        )

    # ------------------------------------------------------------------ the run
    def evaluate(self, episodes: list[Any] | None = None) -> dict[str, float]:
        """Held-out evaluation's metrics (``eval/...``); ``episodes``, when given, gets
        every episode played (all envs, all ranks' shares), for a caller's own measures."""
        e = self.cfg.eval
        sampling = SamplingParams(
            max_tokens=e.max_tokens or self.cfg.rollout.max_tokens,
            temperature=e.temperature,
            seed=derive_seed("eval", self.cfg.run.seed),
        )
        seeds = list(range(e.seed_start, e.seed_start + e.num_tasks))
        self._phase("eval")
        self.engine.wake()
        mine = self.engine.replicas.deal(seeds)  # each replica plays its share

        def play() -> list[list[Any]]:
            return asyncio.run(
                evaluate_async(
                    self.policy,
                    self.cfg.envs,
                    self.tokenizer,
                    seeds=mine,
                    sampling=sampling,
                    concurrency=self.cfg.rollout.concurrency,
                    env_host=self.rollouts.env_host,
                    progress=self.cfg.run.progress and self.dist.is_main,
                    episode_timeout_s=self.cfg.rollout.episode_timeout_s,
                    label=f"eval (after step {self.step})",
                )
            )[1]

        with weights_for(self.engine, self.learner):
            per_env = self.engine.drive(play) or [[] for _ in self.cfg.envs]
        if self.dist.world_size > 1:  # every replica played its share of the seeds
            parts = all_gather_objects(per_env, self.dist)
            per_env = [
                sorted((ep for part in parts for ep in part[i]), key=lambda ep: ep.seed)
                for i in range(len(per_env))
            ]
        if episodes is not None:
            episodes.extend(ep for eps in per_env for ep in eps)
        return eval_metrics(self.env_ids, per_env)

    def adapter_digest(self) -> str:
        """SHA-256 of the LoRA weights (gathered): equal on every rank of a healthy run."""
        return self.learner.adapter_digest()

    def check_ranks_agree(self) -> dict[str, Any]:
        """Every rank's adapter digest; written to ``ranks/rank<r>.json`` and compared.

        Raises:
            RuntimeError: when the ranks hold different adapters (they diverged).
        """
        digest = self.adapter_digest()
        record = {
            "rank": self.dist.rank,
            "world_size": self.dist.world_size,
            "step": self.step,
            "strategy": self.cfg.distributed.strategy,
            "adapter_sha256": digest,
            "initial_adapter_sha256": self.initial_adapter_digest,
        }
        ranks = self.out / "ranks"
        ranks.mkdir(parents=True, exist_ok=True)
        (ranks / f"rank{self.dist.rank}.json").write_text(json.dumps(record, indent=1) + "\n")
        digests = all_gather_objects(digest, self.dist)
        if len(set(digests)) != 1:
            raise RuntimeError(
                f"ranks hold different adapters after step {self.step}: {digests}. "
                "The ranks diverged; this is a bug, please report it with the run directory."
            )
        return record

    def _stopped(self, *, saved: bool) -> RunStopped:
        """Why the run stops after this step (a signal, or the launcher's request)."""
        kept = "its checkpoint is saved" if saved else "not saved"
        if not self.signals.signum:
            return RunStopped(
                f"stopped after step {self.step} at the launcher's request (a faulty rank, "
                f"see faults.jsonl); {kept}."
            )
        name = signal.Signals(self.signals.signum).name
        stopped = RunStopped(
            f"stopped after step {self.step} on {name}; {kept}. Continue with --resume."
        )
        stopped.exit_code = self.signals.exit_code
        return stopped

    def _checkpoint(self) -> None:
        """:meth:`save`, timed on the timeline (phase ``checkpoint`` of this step)."""
        tl = Timeline()
        self._phase("checkpoint")
        with tl.phase("checkpoint"):
            self.save()
        for row in tl.to_records(self.step, self.origin):
            self.timeline_log.write(row)

    def save(self) -> Path:
        """A checkpoint of this step (:attr:`checkpoints`; a collective: all ranks call it)."""
        return self.checkpoints.save(self.step)

    def train(self) -> list[dict[str, Any]]:
        """Run to ``run.max_steps`` (value pretraining and the evaluations at the ends
        included); returns the per-step metrics of this invocation. A first SIGTERM or
        SIGINT stops it after the step in progress, with a checkpoint
        (:class:`~.stopping.PoliteSignals`)."""
        cfg = self.cfg
        history: list[dict[str, Any]] = []
        progress = Progress(
            cfg.run.max_steps,
            desc=cfg.algorithm.name or "dapo",
            start=self.step,
            enabled=cfg.run.progress and self.dist.is_main,
        )
        try:
            with self.signals:
                self._run(history, progress)
        finally:
            progress.close()
            self._close_parts(heartbeat=False)  # it beats until the process exits
            self._phase("finishing")
        try:
            if self.dist.world_size > 1 and cfg.lora.enabled:
                self.check_ranks_agree()
            if cfg.run.plots and self.dist.is_main:
                plot_run(self.out)
            if self.dist.is_main:
                write_summary(self.out)
        finally:
            if self.run_lock is not None:
                self.run_lock.release()
        return history

    def _run(self, history: list[dict[str, Any]], progress: Progress) -> None:
        """The steps, each row written, checkpointed when due, ended early when asked."""
        cfg = self.cfg
        if self.step == 0 and self.learner.critic_config is not None and cfg.critic.pretrain_steps:
            self.pretrain_critic()  # VAPO's value pretraining
        evals_each_step = bool(cfg.eval.every)
        if cfg.eval.at_ends and self.step == 0:
            self.metrics_log.write({"step": 0, **self._timed_eval()})
        while self.step < cfg.run.max_steps:
            m = self.train_step()
            if evals_each_step and self.step % cfg.eval.every == 0:
                m.update(self._timed_eval())
            stop = self._stop_requested()
            save = cfg.run.save_every and self.step % cfg.run.save_every == 0
            # the step's rows are written before the checkpoint that marks it done: a
            # kill in between redoes the step on --resume (its rows are replaced)
            self.metrics_log.write(m)
            if save or stop == 2 or self.step == cfg.run.max_steps:
                self._checkpoint()
            history.append(m)
            progress.update(1, progress_stats(m))
            if self.heartbeat is not None:
                self.heartbeat.step_done(self.step, m)
            if stop:
                raise self._stopped(saved=stop == 2 or bool(save))
            if self.worker_monitor is not None:
                self.worker_monitor.check()
        evaluated_last = evals_each_step and self.step % cfg.eval.every == 0
        if cfg.eval.at_ends and not evaluated_last and history:
            self.metrics_log.write({"step": self.step, **self.evaluate()})

    def _timed_eval(self) -> dict[str, float]:
        """:meth:`evaluate`'s metrics and ``time/eval_s``."""
        tl = Timeline()
        with tl.phase("eval"):
            metrics = self.evaluate()
        return {**metrics, "time/eval_s": tl.seconds("eval")}

    def _say(self, text: str) -> None:
        """A message on stderr, from rank 0 only."""
        if self.dist.is_main:
            print(text, file=sys.stderr)
