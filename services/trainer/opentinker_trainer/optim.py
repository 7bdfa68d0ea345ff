"""AdamW over the trainable parameters and the learning-rate schedule (a pure function of
the step, so resuming needs only the step count). Each step sets every hyperparameter of the
optimizer's param groups from an AdamStep: the schedule's, or OptimStepRequest.adam's."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from opentinker_trainer.config import AdamStep, LrSchedule, OptimizerConfig


def build_optimizer(parameters: Iterable[torch.nn.Parameter],
                    config: OptimizerConfig) -> torch.optim.AdamW:
    return torch.optim.AdamW(list(parameters), lr=learning_rate_at(config, 0),
                             betas=(config.beta1, config.beta2), eps=config.epsilon,
                             weight_decay=config.weight_decay)


def learning_rate_at(config: OptimizerConfig, step: int) -> float:
    """The rate of optimizer step `step` (0-based): linear warmup over warmup_steps, then the
    schedule decays from learning_rate to 0 at total_steps (constant when total_steps = 0)."""
    if step < config.warmup_steps:
        return config.learning_rate * (step + 1) / config.warmup_steps
    if config.schedule == LrSchedule.CONSTANT or config.total_steps <= config.warmup_steps:
        return config.learning_rate
    progress = min(1.0, (step - config.warmup_steps) / (config.total_steps - config.warmup_steps))
    if config.schedule == LrSchedule.LINEAR:
        return config.learning_rate * (1.0 - progress)
    return config.learning_rate * 0.5 * (1.0 + math.cos(math.pi * progress))


def scheduled_adam_step(config: OptimizerConfig, step: int, learning_rate: float = 0.0) -> AdamStep:
    """The session config's hyperparameters at `step`; `learning_rate` > 0 replaces the
    schedule's rate."""
    return AdamStep(learning_rate=learning_rate or learning_rate_at(config, step),
                    beta1=config.beta1, beta2=config.beta2, epsilon=config.epsilon,
                    weight_decay=config.weight_decay, max_grad_norm=config.max_grad_norm)


def set_hyperparameters(optimizer: torch.optim.Optimizer, adam: AdamStep) -> None:
    """Every param group takes `adam`'s rate, betas, epsilon and weight decay (the optimizer's
    state_dict, and so a checkpoint, holds them)."""
    for group in optimizer.param_groups:
        group["lr"] = adam.learning_rate
        group["betas"] = (adam.beta1, adam.beta2)
        group["eps"] = adam.epsilon
        group["weight_decay"] = adam.weight_decay
