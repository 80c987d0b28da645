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
