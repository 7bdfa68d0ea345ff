from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LossFunction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LOSS_FUNCTION_UNSPECIFIED: _ClassVar[LossFunction]
    LOSS_FUNCTION_CROSS_ENTROPY: _ClassVar[LossFunction]
    LOSS_FUNCTION_POLICY_GRADIENT: _ClassVar[LossFunction]
    LOSS_FUNCTION_PPO_CLIP: _ClassVar[LossFunction]
    LOSS_FUNCTION_DUAL_CLIP: _ClassVar[LossFunction]
    LOSS_FUNCTION_TRUNCATED_IS: _ClassVar[LossFunction]
    LOSS_FUNCTION_GSPO: _ClassVar[LossFunction]
    LOSS_FUNCTION_IMPORTANCE_SAMPLING: _ClassVar[LossFunction]
    LOSS_FUNCTION_CISPO: _ClassVar[LossFunction]
    LOSS_FUNCTION_DRO: _ClassVar[LossFunction]

class LossAggregation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LOSS_AGGREGATION_UNSPECIFIED: _ClassVar[LossAggregation]
    LOSS_AGGREGATION_TOKEN_MEAN: _ClassVar[LossAggregation]
    LOSS_AGGREGATION_SEQUENCE_MEAN: _ClassVar[LossAggregation]
    LOSS_AGGREGATION_TOKEN_SUM_NORM: _ClassVar[LossAggregation]
    LOSS_AGGREGATION_SUM: _ClassVar[LossAggregation]

class KlEstimator(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    KL_ESTIMATOR_UNSPECIFIED: _ClassVar[KlEstimator]
    KL_ESTIMATOR_K1: _ClassVar[KlEstimator]
    KL_ESTIMATOR_K3: _ClassVar[KlEstimator]

class KlPlacement(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    KL_PLACEMENT_UNSPECIFIED: _ClassVar[KlPlacement]
    KL_PLACEMENT_LOSS: _ClassVar[KlPlacement]
    KL_PLACEMENT_REWARD: _ClassVar[KlPlacement]

class ImportanceMask(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    IMPORTANCE_MASK_UNSPECIFIED: _ClassVar[ImportanceMask]
    IMPORTANCE_MASK_TOKEN: _ClassVar[ImportanceMask]
    IMPORTANCE_MASK_SEQUENCE: _ClassVar[ImportanceMask]

class AdvantageEstimator(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ADVANTAGE_ESTIMATOR_UNSPECIFIED: _ClassVar[AdvantageEstimator]
    ADVANTAGE_ESTIMATOR_GRPO: _ClassVar[AdvantageEstimator]
    ADVANTAGE_ESTIMATOR_RLOO: _ClassVar[AdvantageEstimator]
    ADVANTAGE_ESTIMATOR_REINFORCE_PLUS_PLUS: _ClassVar[AdvantageEstimator]
    ADVANTAGE_ESTIMATOR_DISCOUNTED_RETURN: _ClassVar[AdvantageEstimator]

class LrSchedule(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LR_SCHEDULE_UNSPECIFIED: _ClassVar[LrSchedule]
    LR_SCHEDULE_CONSTANT: _ClassVar[LrSchedule]
    LR_SCHEDULE_LINEAR: _ClassVar[LrSchedule]
    LR_SCHEDULE_COSINE: _ClassVar[LrSchedule]
LOSS_FUNCTION_UNSPECIFIED: LossFunction
LOSS_FUNCTION_CROSS_ENTROPY: LossFunction
LOSS_FUNCTION_POLICY_GRADIENT: LossFunction
LOSS_FUNCTION_PPO_CLIP: LossFunction
LOSS_FUNCTION_DUAL_CLIP: LossFunction
LOSS_FUNCTION_TRUNCATED_IS: LossFunction
LOSS_FUNCTION_GSPO: LossFunction
LOSS_FUNCTION_IMPORTANCE_SAMPLING: LossFunction
LOSS_FUNCTION_CISPO: LossFunction
LOSS_FUNCTION_DRO: LossFunction
LOSS_AGGREGATION_UNSPECIFIED: LossAggregation
LOSS_AGGREGATION_TOKEN_MEAN: LossAggregation
LOSS_AGGREGATION_SEQUENCE_MEAN: LossAggregation
LOSS_AGGREGATION_TOKEN_SUM_NORM: LossAggregation
LOSS_AGGREGATION_SUM: LossAggregation
KL_ESTIMATOR_UNSPECIFIED: KlEstimator
KL_ESTIMATOR_K1: KlEstimator
KL_ESTIMATOR_K3: KlEstimator
KL_PLACEMENT_UNSPECIFIED: KlPlacement
KL_PLACEMENT_LOSS: KlPlacement
KL_PLACEMENT_REWARD: KlPlacement
IMPORTANCE_MASK_UNSPECIFIED: ImportanceMask
IMPORTANCE_MASK_TOKEN: ImportanceMask
IMPORTANCE_MASK_SEQUENCE: ImportanceMask
ADVANTAGE_ESTIMATOR_UNSPECIFIED: AdvantageEstimator
ADVANTAGE_ESTIMATOR_GRPO: AdvantageEstimator
ADVANTAGE_ESTIMATOR_RLOO: AdvantageEstimator
ADVANTAGE_ESTIMATOR_REINFORCE_PLUS_PLUS: AdvantageEstimator
ADVANTAGE_ESTIMATOR_DISCOUNTED_RETURN: AdvantageEstimator
LR_SCHEDULE_UNSPECIFIED: LrSchedule
LR_SCHEDULE_CONSTANT: LrSchedule
LR_SCHEDULE_LINEAR: LrSchedule
LR_SCHEDULE_COSINE: LrSchedule

class LossConfig(_message.Message):
    __slots__ = ("function", "aggregation", "clip_low", "clip_high", "dual_clip_c", "truncation_cap", "token_sum_divisor", "kl_coef", "kl_estimator", "kl_placement", "entropy_coef", "temperature", "importance_mask", "importance_mask_low", "importance_mask_high", "dro_beta")
    FUNCTION_FIELD_NUMBER: _ClassVar[int]
    AGGREGATION_FIELD_NUMBER: _ClassVar[int]
    CLIP_LOW_FIELD_NUMBER: _ClassVar[int]
    CLIP_HIGH_FIELD_NUMBER: _ClassVar[int]
    DUAL_CLIP_C_FIELD_NUMBER: _ClassVar[int]
    TRUNCATION_CAP_FIELD_NUMBER: _ClassVar[int]
    TOKEN_SUM_DIVISOR_FIELD_NUMBER: _ClassVar[int]
    KL_COEF_FIELD_NUMBER: _ClassVar[int]
    KL_ESTIMATOR_FIELD_NUMBER: _ClassVar[int]
    KL_PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    ENTROPY_COEF_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    IMPORTANCE_MASK_FIELD_NUMBER: _ClassVar[int]
    IMPORTANCE_MASK_LOW_FIELD_NUMBER: _ClassVar[int]
    IMPORTANCE_MASK_HIGH_FIELD_NUMBER: _ClassVar[int]
    DRO_BETA_FIELD_NUMBER: _ClassVar[int]
    function: LossFunction
    aggregation: LossAggregation
    clip_low: float
    clip_high: float
    dual_clip_c: float
    truncation_cap: float
    token_sum_divisor: float
    kl_coef: float
    kl_estimator: KlEstimator
    kl_placement: KlPlacement
    entropy_coef: float
    temperature: float
    importance_mask: ImportanceMask
    importance_mask_low: float
    importance_mask_high: float
    dro_beta: float
    def __init__(self, function: _Optional[_Union[LossFunction, str]] = ..., aggregation: _Optional[_Union[LossAggregation, str]] = ..., clip_low: _Optional[float] = ..., clip_high: _Optional[float] = ..., dual_clip_c: _Optional[float] = ..., truncation_cap: _Optional[float] = ..., token_sum_divisor: _Optional[float] = ..., kl_coef: _Optional[float] = ..., kl_estimator: _Optional[_Union[KlEstimator, str]] = ..., kl_placement: _Optional[_Union[KlPlacement, str]] = ..., entropy_coef: _Optional[float] = ..., temperature: _Optional[float] = ..., importance_mask: _Optional[_Union[ImportanceMask, str]] = ..., importance_mask_low: _Optional[float] = ..., importance_mask_high: _Optional[float] = ..., dro_beta: _Optional[float] = ...) -> None: ...

class AdvantageConfig(_message.Message):
    __slots__ = ("estimator", "normalize_by_std", "gamma")
    ESTIMATOR_FIELD_NUMBER: _ClassVar[int]
    NORMALIZE_BY_STD_FIELD_NUMBER: _ClassVar[int]
    GAMMA_FIELD_NUMBER: _ClassVar[int]
    estimator: AdvantageEstimator
    normalize_by_std: bool
    gamma: float
    def __init__(self, estimator: _Optional[_Union[AdvantageEstimator, str]] = ..., normalize_by_std: _Optional[bool] = ..., gamma: _Optional[float] = ...) -> None: ...

class OptimizerConfig(_message.Message):
    __slots__ = ("learning_rate", "weight_decay", "beta1", "beta2", "epsilon", "max_grad_norm", "warmup_steps", "schedule", "total_steps")
    LEARNING_RATE_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_DECAY_FIELD_NUMBER: _ClassVar[int]
    BETA1_FIELD_NUMBER: _ClassVar[int]
    BETA2_FIELD_NUMBER: _ClassVar[int]
    EPSILON_FIELD_NUMBER: _ClassVar[int]
    MAX_GRAD_NORM_FIELD_NUMBER: _ClassVar[int]
    WARMUP_STEPS_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_STEPS_FIELD_NUMBER: _ClassVar[int]
    learning_rate: float
    weight_decay: float
    beta1: float
    beta2: float
    epsilon: float
    max_grad_norm: float
    warmup_steps: int
    schedule: LrSchedule
    total_steps: int
    def __init__(self, learning_rate: _Optional[float] = ..., weight_decay: _Optional[float] = ..., beta1: _Optional[float] = ..., beta2: _Optional[float] = ..., epsilon: _Optional[float] = ..., max_grad_norm: _Optional[float] = ..., warmup_steps: _Optional[int] = ..., schedule: _Optional[_Union[LrSchedule, str]] = ..., total_steps: _Optional[int] = ...) -> None: ...

class AdamStepParams(_message.Message):
    __slots__ = ("learning_rate", "beta1", "beta2", "epsilon", "weight_decay", "max_grad_norm")
    LEARNING_RATE_FIELD_NUMBER: _ClassVar[int]
    BETA1_FIELD_NUMBER: _ClassVar[int]
    BETA2_FIELD_NUMBER: _ClassVar[int]
    EPSILON_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_DECAY_FIELD_NUMBER: _ClassVar[int]
    MAX_GRAD_NORM_FIELD_NUMBER: _ClassVar[int]
    learning_rate: float
    beta1: float
    beta2: float
    epsilon: float
    weight_decay: float
    max_grad_norm: float
    def __init__(self, learning_rate: _Optional[float] = ..., beta1: _Optional[float] = ..., beta2: _Optional[float] = ..., epsilon: _Optional[float] = ..., weight_decay: _Optional[float] = ..., max_grad_norm: _Optional[float] = ...) -> None: ...

class Algorithm(_message.Message):
    __slots__ = ("loss", "advantage", "optimizer")
    LOSS_FIELD_NUMBER: _ClassVar[int]
    ADVANTAGE_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_FIELD_NUMBER: _ClassVar[int]
    loss: LossConfig
    advantage: AdvantageConfig
    optimizer: OptimizerConfig
    def __init__(self, loss: _Optional[_Union[LossConfig, _Mapping]] = ..., advantage: _Optional[_Union[AdvantageConfig, _Mapping]] = ..., optimizer: _Optional[_Union[OptimizerConfig, _Mapping]] = ...) -> None: ...
