from experiments.models.online import (  # noqa: F401
    Arm, Experiment, ExperimentState, Exposure, Feedback, FeedbackKind, FeedbackStatus,
)
