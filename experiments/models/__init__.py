from experiments.models.datasets import Dataset, DatasetBuildRequest, DatasetRequestStatus  # noqa: F401, E402
from experiments.models.online import (  # noqa: F401
    Arm,
    DeadLetter,
    Experiment,
    ExperimentState,
    Exposure,
    Feedback,
    FeedbackKind,
    FeedbackStatus,
)
