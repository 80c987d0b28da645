"""Registry data: teams and roles, models, versions, artifacts, builds, the audit trail,
what an LLM version is (its LLMSpec: a model directory or a backend reference) with
the team's provider secrets it may name, and what a generative recommender is (its GRSpec)
with the item catalogs its semantic ids name (ItemCatalog, ItemCatalogVersion).

Data and invariants only; every write goes through registry.services.

Why this is one long module: every registry table is here, so migrations and the admin
read one place; the LLM tables are small and reference ModelVersion and the teams.
"""

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models
from django.db.models import Q


class Role(models.TextChoices):
    """Roles rank: each one may do what the ones before it may."""

    VIEWER = "viewer", "Viewer"
    DEVELOPER = "developer", "Developer"  # registers models, starts builds
    DEPLOYER = "deployer", "Deployer"  # rolls out
    ADMIN = "admin", "Admin"  # manages the team

    @classmethod
    def rank(cls, role: str) -> int:
        return [c.value for c in cls].index(role)


class TeamMembership(models.Model):
    """A user's role in a team. Teams are Django groups."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    team = models.ForeignKey(Group, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "team"], name="uniq_membership")]
        ordering = ["team__name", "user__username"]

    def __str__(self):
        return f"{self.user} in {self.team} as {self.role}"


class Task(models.TextChoices):
    CTR = "ctr", "Click-through rate"
    RANKING = "ranking", "Ranking"
    CLASSIFICATION = "classification", "Classification"
    REGRESSION = "regression", "Regression"
    EMBEDDING = "embedding", "Embedding"
    LLM = "llm", "Large language model (OpenAI API endpoints)"
    GENERATIVE_REC = "generative_rec", "Generative recommender (semantic-id beam search)"
    OTHER = "other", "Other"


class RegisteredModel(models.Model):
    name = models.SlugField(max_length=64, unique=True, help_text="Lower-case letters, digits, - and _.")
    description = models.TextField(blank=True)
    task = models.CharField(max_length=32, choices=Task.choices, default=Task.CTR)
    team = models.ForeignKey(Group, on_delete=models.PROTECT, related_name="models")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class VersionSource(models.TextChoices):
    UPLOAD = "upload", "Uploaded ONNX file"
    MLFLOW = "mlflow", "MLflow model URI"
    LLM_DIR = "llm_dir", "Uploaded LLM model directory"
    LLM_BACKEND = "llm_backend", "LLM backend reference (OpenAI-compatible server)"
    GR_BUNDLE = "gr_bundle", "Generative recommender bundle (graphs, codebook, holdout)"


class Framework(models.TextChoices):
    ONNX = "onnx", "ONNX"
    PYTORCH = "pytorch", "PyTorch"
    TRANSFORMERS = "transformers", "Hugging Face model directory"
    OPENAI = "openai", "OpenAI-compatible API"


class VersionStatus(models.TextChoices):
    REGISTERED = "registered", "Registered"
    BUILDING = "building", "Building"
    READY = "ready", "Ready"  # at least one servable artifact
    FAILED = "failed", "Failed"
    ARCHIVED = "archived", "Archived"


class ModelVersion(models.Model):
    model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField()
    source = models.CharField(max_length=16, choices=VersionSource.choices)
    source_uri = models.CharField(max_length=1024, blank=True, help_text="MLflow model URI when source=mlflow.")
    framework = models.CharField(max_length=16, choices=Framework.choices, default=Framework.ONNX)
    # Content-addressed path (relative to ARTIFACT_ROOT) of the uploaded file.
    file_path = models.CharField(max_length=512, blank=True)
    file_sha256 = models.CharField(max_length=64, blank=True)
    file_size = models.BigIntegerField(null=True, blank=True)
    original_filename = models.CharField(max_length=255, blank=True)
    # {"inputs": [{"name", "dtype", "shape"}], "outputs": [...]}; -1 marks a dynamic dimension.
    signature = models.JSONField(default=dict, blank=True)
    metrics = models.JSONField(default=dict, blank=True, help_text="Training metrics, e.g. {'auc': 0.78}.")
    tags = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=VersionStatus.choices, default=VersionStatus.REGISTERED)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["model__name", "-version"]
        constraints = [
            models.UniqueConstraint(fields=["model", "version"], name="uniq_model_version"),
            models.CheckConstraint(
                condition=(Q(source__in=["upload", "llm_dir", "gr_bundle"]) & ~Q(file_sha256=""))
                | (Q(source__in=["mlflow", "llm_backend"]) & ~Q(source_uri="")),
                name="version_has_source",
            ),
        ]

    def __str__(self):
        return f"{self.model.name} v{self.version}"


class VersionAlias(models.Model):
    """A named pointer to one version of a model, as MLflow's @champion / @challenger:
    pipelines deploy `models:/{model}@{alias}` and moving the alias changes what they get."""

    model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="aliases")
    name = models.CharField(max_length=64, help_text="Lower-case letters, digits, - and _, e.g. champion.")
    version = models.ForeignKey(ModelVersion, on_delete=models.CASCADE, related_name="aliases")
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["model", "name"]
        verbose_name_plural = "version aliases"
        constraints = [models.UniqueConstraint(fields=["model", "name"], name="uniq_model_alias")]

    def __str__(self):
        return f"{self.model.name}@{self.name}"


class DataKind(models.TextChoices):
    EXAMPLE = "example", "Input example"
    VALIDATION = "validation", "Labelled validation set"


class VersionData(models.Model):
    """Data a version carries (registry/services/version_data.py): at most one input example
    and one labelled validation set, checked against the signature and stored as NPZ in the
    content-addressed store (`path`, relative to ARTIFACT_ROOT). Builds validate and
    benchmark on it; without it they use inputs derived from the graph."""

    version = models.ForeignKey(ModelVersion, on_delete=models.CASCADE, related_name="data")
    kind = models.CharField(max_length=16, choices=DataKind.choices)
    path = models.CharField(max_length=512)
    sha256 = models.CharField(max_length=64)
    size_bytes = models.BigIntegerField()
    format = models.CharField(max_length=16, help_text="What was sent: npz, parquet, jsonl or mlflow.")
    original_filename = models.CharField(max_length=255, blank=True)
    rows = models.PositiveIntegerField()
    label = models.CharField(max_length=128, blank=True, help_text="The label column/array name in what was sent.")
    summary = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = verbose_name_plural = "version data"  # a mass noun: not "version datas"
        ordering = ["version", "kind"]
        constraints = [models.UniqueConstraint(fields=["version", "kind"], name="uniq_version_data_kind")]

    def __str__(self):
        return f"{self.kind} of {self.version}"


class BuildStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"

    @classmethod
    def terminal(cls) -> set[str]:
        return {cls.SUCCEEDED, cls.FAILED, cls.CANCELLED}


class Build(models.Model):
    """One run of the artifact factory over a version (filled by registry/factory/)."""

    version = models.ForeignKey(ModelVersion, on_delete=models.CASCADE, related_name="builds")
    targets = models.JSONField(default=list)
    # The tune request ({"slo_p99_ms", "variants", "budget_s", …}; registry/factory/tune/request.py),
    # {} when the build asked for none; a build with one runs the `tune` stage after package.
    tune = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=BuildStatus.choices, default=BuildStatus.QUEUED)
    progress = models.PositiveSmallIntegerField(default=0)
    # [{"name", "status", "started_at", "duration_s", "log"}] in pipeline order.
    stages = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True)
    # A generative recommender's build: the catalog version it packages (null: the version's own).
    item_catalog_version = models.ForeignKey(
        "ItemCatalogVersion", null=True, blank=True, on_delete=models.PROTECT, related_name="builds"
    )
    attempt = models.PositiveSmallIntegerField(default=0)
    max_attempts = models.PositiveSmallIntegerField(default=3)
    lease_owner = models.CharField(max_length=128, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    idempotency_key = models.CharField(max_length=128, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["version", "idempotency_key"],
                condition=~Q(idempotency_key=""),
                name="uniq_build_idempotency_key",
            ),
            models.CheckConstraint(condition=Q(progress__lte=100), name="build_progress_le_100"),
        ]

    def __str__(self):
        return f"build #{self.pk} of {self.version}"


class ArtifactStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    SERVABLE = "servable", "Servable"
    REJECTED = "rejected", "Rejected"  # failed validation; kept with its evidence
    SKIPPED = "skipped", "Skipped"  # e.g. a GPU-only variant on a worker without a GPU


class Artifact(models.Model):
    """A serving variant of a version, produced by a build."""

    version = models.ForeignKey(ModelVersion, on_delete=models.CASCADE, related_name="artifacts")
    build = models.ForeignKey(Build, on_delete=models.CASCADE, related_name="artifacts")
    variant = models.CharField(max_length=32, help_text="onnx-fp32, onnx-int8, onnx-fp16, tensorrt, …")
    status = models.CharField(max_length=16, choices=ArtifactStatus.choices, default=ArtifactStatus.PENDING)
    status_reason = models.TextField(blank=True)
    triton_model_name = models.CharField(max_length=200, blank=True)
    # Content-addressed Triton model directory (relative to ARTIFACT_ROOT).
    path = models.CharField(max_length=512, blank=True)
    sha256 = models.CharField(max_length=64, blank=True)
    size_bytes = models.BigIntegerField(null=True, blank=True)
    validation = models.JSONField(default=dict, blank=True)
    benchmark = models.JSONField(default=dict, blank=True)
    # A generative recommender's variant serves one catalog version (its trie and item map are in it).
    item_catalog_version = models.ForeignKey(
        "ItemCatalogVersion", null=True, blank=True, on_delete=models.PROTECT, related_name="artifacts"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["version", "variant"]
        constraints = [models.UniqueConstraint(fields=["build", "variant"], name="uniq_build_variant")]

    def __str__(self):
        return self.triton_model_name or f"{self.version} {self.variant}"


class EventAction(models.TextChoices):
    """Every audit action (`Event.action`), one word per thing that happens; `event_record`
    takes only these. A state change of any object (a rollout's step, an experiment's
    decision, a build's or a pool's status) is STATUS_CHANGED with from_state -> to_state."""

    CREATED = "created"
    UPDATED = "updated"
    DELETED = "deleted"
    STATUS_CHANGED = "status_changed"
    ROLE_SET = "role_set"  # a team membership's role
    DATA_ATTACHED = "data_attached"  # a version's sample or validation data
    DATA_REMOVED = "data_removed"
    REDISPATCHED = "redispatched"  # a build whose worker vanished, queued again
    ACCESS_CHANGED = "access_changed"  # an endpoint's public flag or keys
    REVOKED = "revoked"  # an inference key
    SCALED = "scaled"
    DELETE_REQUESTED = "delete_requested"
    DELETE_FAILED = "delete_failed"
    MODEL_LOAD_REQUESTED = "model_load_requested"
    MODEL_LOADED = "model_loaded"
    MODEL_LOAD_FAILED = "model_load_failed"
    MODEL_RELOADED = "model_reloaded"
    MODEL_RELOAD_FAILED = "model_reload_failed"
    MODEL_DRAIN_STARTED = "model_drain_started"
    MODEL_UNLOADED = "model_unloaded"
    MODEL_UNLOAD_FAILED = "model_unload_failed"
    REPLICA_DOWN = "replica_down"
    REPLICA_RESTARTED = "replica_restarted"
    REPLICA_RETIRING = "replica_retiring"
    ALIAS_SET = "alias_set"  # a model's alias (e.g. @champion) set on a version or moved to another
    ALIAS_DELETED = "alias_deleted"
    STABLE_CHANGED = "stable_changed"  # an endpoint's stable artifact, by a rollout's promotion
    BASELINE_UNAVAILABLE = "baseline_unavailable"  # a rollout's fair baseline could not be loaded
    ALERT_RAISED = "alert_raised"
    ALERT_REOPENED = "alert_reopened"
    ALERT_ACKNOWLEDGED = "alert_acknowledged"
    ALERT_RESOLVED = "alert_resolved"
    CHANNEL_CREATED = "channel_created"
    CHANNEL_DELETED = "channel_deleted"


class Event(models.Model):
    """Audit trail: every state change, written in the same transaction as the change."""

    time = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Scopes who may read the event; null for platform-wide events (staff only).
    team = models.ForeignKey(Group, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    object_type = models.CharField(max_length=64)  # "registry.modelversion"
    object_id = models.CharField(max_length=64)
    object_repr = models.CharField(max_length=200)
    action = models.CharField(max_length=64, choices=EventAction.choices)
    from_state = models.CharField(max_length=64, blank=True)
    to_state = models.CharField(max_length=64, blank=True)
    reason = models.TextField(blank=True)
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-time", "-id"]
        indexes = [models.Index(fields=["object_type", "object_id", "-time"], name="event_object_idx")]

    def __str__(self):
        return f"{self.time:%Y-%m-%d %H:%M:%S} {self.object_repr} {self.action}"


class ProviderSecret(models.Model):
    """A team's provider API key (e.g. an external LLM provider's), named by LLM backend
    references. `ciphertext` is the value encrypted with Fernet (registry/secret_box.py);
    the value is returned once, by the service that creates it, and never again: listings
    show the name, the dates and `last4`. `origins` ("https://api.example.com[:port]") are
    where the value may be sent, bound when an admin stores it: a backend reference at
    another origin may not name it, and the gateway checks again before it sends."""

    team = models.ForeignKey(Group, on_delete=models.PROTECT, related_name="provider_secrets")
    name = models.SlugField(max_length=64, help_text="What backend references call it, e.g. 'openai-prod'.")
    ciphertext = models.TextField()
    origins = models.JSONField(
        default=list, blank=True, help_text="Origins the value may be sent to (scheme://host[:port]), set when stored."
    )
    last4 = models.CharField(max_length=4, blank=True, help_text="The value's last characters (of a long value).")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["team__name", "name"]
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="uniq_secret_name_per_team")]

    def __str__(self):
        return f"secret {self.name} of {self.team}"

    @property
    def gateway_id(self) -> str:
        """The secret's id in the route table (backend.secret, top-level secrets)."""
        return f"s{self.pk}"


class LLMKind(models.TextChoices):
    DIR = "dir", "Model directory served by a Triton pool"
    OPENAI = "openai", "OpenAI-compatible backend"


MAX_CONTEXT_LENGTH = 10_000_000  # the route table schema's bound


class LLMSpec(models.Model):
    """What an LLM model version is (registry/services/llm.py): (a) kind `dir`, a Hugging
    Face format directory (the version's file_path) served through Triton's generate
    extension; (b) kind `openai`, a reference to an OpenAI-compatible server (vLLM, TGI,
    llama.cpp, an external provider) at `base_url` serving `upstream_model`, with the
    team's `secret` as its bearer key when it needs one."""

    version = models.OneToOneField(ModelVersion, on_delete=models.CASCADE, related_name="llm")
    kind = models.CharField(max_length=8, choices=LLMKind.choices)
    context_length = models.PositiveIntegerField(help_text="Prompt + completion tokens the model takes.")
    # {"name": tokenizer class or name, "files": [tokenizer files in the directory], "chat_template": bool}
    tokenizer = models.JSONField(default=dict, blank=True)
    base_url = models.CharField(max_length=2000, blank=True, help_text="openai: the base URL ending in /v1.")
    upstream_model = models.CharField(max_length=256, blank=True, help_text="openai: the model id sent upstream.")
    secret = models.ForeignKey(ProviderSecret, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    cost_per_1k_prompt = models.FloatField(default=0.0)
    cost_per_1k_completion = models.FloatField(default=0.0)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(context_length__gte=1, context_length__lte=MAX_CONTEXT_LENGTH), name="llm_context_bounds"
            ),
            models.CheckConstraint(
                condition=Q(kind="dir") | (~Q(base_url="") & ~Q(upstream_model="")), name="llm_openai_has_url"
            ),
            models.CheckConstraint(
                condition=Q(cost_per_1k_prompt__gte=0, cost_per_1k_completion__gte=0), name="llm_cost_non_negative"
            ),
        ]

    def __str__(self):
        return f"{self.version} ({self.kind})"


class ItemCatalog(models.Model):
    """A team's item catalog for generative recommenders: the items semantic ids name, in
    versions (registry/services/item_catalogs.py). Its shape (levels x codes_per_level) is fixed:
    every version's ids and every model built against it use it."""

    name = models.SlugField(max_length=64, unique=True, help_text="Lower-case letters, digits, - and _.")
    description = models.TextField(blank=True)
    team = models.ForeignKey(Group, on_delete=models.PROTECT, related_name="item_catalogs")
    levels = models.PositiveSmallIntegerField(help_text="Codes per semantic id.")
    codes_per_level = models.PositiveIntegerField(help_text="Distinct codes at each level.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(levels__gte=1, levels__lte=8), name="catalog_levels_bounds"),
            models.CheckConstraint(
                condition=Q(codes_per_level__gte=2, codes_per_level__lte=4096), name="catalog_codes_bounds"
            ),
        ]

    def __str__(self):
        return f"catalog {self.name}"


class ItemCatalogVersion(models.Model):
    """One immutable set of items: `path` (relative to ARTIFACT_ROOT, content-addressed) holds
    items.npz (item_id int64 [n], semantic_id [n, levels]) and the trie compiled from it
    (trie.npz). New items make a new version; models and artifacts name the version they serve."""

    catalog = models.ForeignKey(ItemCatalog, on_delete=models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField()
    path = models.CharField(max_length=512)
    sha256 = models.CharField(max_length=64)
    items = models.PositiveIntegerField()
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", help_text="The version it extends."
    )
    # The codebook that encoded the items added by this version (blank: ids were given as they are).
    codebook_sha256 = models.CharField(max_length=64, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["catalog__name", "-version"]
        constraints = [models.UniqueConstraint(fields=["catalog", "version"], name="uniq_catalog_version")]

    def __str__(self):
        return f"{self.catalog.name} c{self.version}"


class GRSpec(models.Model):
    """What a generative recommender version is: its bundle (the version's file_path: graphs,
    codebook, holdout; registry/gr/bundle.py), its model shape, and the catalog version it was
    built against (its semantic ids are that catalog's)."""

    version = models.OneToOneField(ModelVersion, on_delete=models.CASCADE, related_name="gr")
    catalog_version = models.ForeignKey(ItemCatalogVersion, on_delete=models.PROTECT, related_name="gr_specs")
    levels = models.PositiveSmallIntegerField()
    codes_per_level = models.PositiveIntegerField()
    layers = models.PositiveSmallIntegerField()
    d_model = models.PositiveIntegerField()
    max_history = models.PositiveIntegerField(help_text="History items the model attends to (its positions).")
    codebook_sha256 = models.CharField(max_length=64)

    def __str__(self):
        return f"{self.version} on {self.catalog_version}"
