"""Admin console of deployments; actions call the same services as the API and the dashboard."""

from django import forms
from django.contrib import admin, messages

from deployments.models import Endpoint, InferenceKey, PoolModel, PoolReplica, PoolSecretBinding, Rollout, ServingPool
from deployments.services import endpoints as endpoint_services
from deployments.services import keys as key_services
from deployments.services import pool_secrets as pool_secret_services
from deployments.services import pools as pool_services
from deployments.services import rollouts as rollout_services
from deployments.services.llm_endpoints import LLM_FIELDS
from kernel.errors import PlatformError


class ServiceForm(forms.ModelForm):
    """An admin form whose save is a service call (the same rules and audit events as the
    API and the dashboard): the service runs in clean(), so a refusal is shown on the
    field it names. super().clean() is not called: the service checks names, uniqueness
    included, and the admin's "already exists" check would answer first."""

    user = None  # set by ServiceAdmin.get_form

    def call_service(self, data: dict):
        raise NotImplementedError

    def clean(self):
        data = self.cleaned_data
        if self.errors:
            return data
        try:
            self.instance = self.call_service(data)
        except PlatformError as exc:
            field = exc.field if exc.field in self.fields else None
            self.add_error(field, exc.detail.removeprefix(f"{field}: ") if field else exc.detail)
        return data

    def given(self, data: dict, names) -> dict:
        """The fields among `names` that the form shows and the user changed from their defaults."""
        return {name: data[name] for name in names if name in self.changed_data and name in data}


class ServiceAdmin(admin.ModelAdmin):
    def get_form(self, request, obj=None, **kwargs):
        form = super().get_form(request, obj, **kwargs)
        return type(form.__name__, (form,), {"user": request.user})

    def save_model(self, request, obj, form, change):
        pass  # the service saved it in the form's clean()


class PoolReplicaInline(admin.TabularInline):
    model = PoolReplica
    extra = 0
    can_delete = False
    readonly_fields = [
        "name",
        "status",
        "http_url",
        "grpc_url",
        "metrics_url",
        "pid",
        "restarts",
        "last_error",
        "started_at",
        "last_seen_at",
    ]
    fields = readonly_fields


class PoolModelInline(admin.TabularInline):
    model = PoolModel
    extra = 0
    can_delete = False
    readonly_fields = ["triton_model_name", "artifact", "state", "error", "replica_ready", "loaded_at"]
    fields = readonly_fields


POOL_CREATE_FIELDS = (
    "driver",
    "replicas",
    "device_kind",
    "gpus_per_replica",
    "resources",
    "model_repository",
    "namespace",
    "image",
    "min_replicas",
    "max_replicas",
    "max_queue_size",
    "queue_timeout_ms",
    "cost_per_replica_hour",
    "autoscale_metric",
    "autoscale_target",
    "repository_secret",
)


class PoolForm(ServiceForm):
    def call_service(self, data):
        if self.instance.pk is None:
            return pool_services.pool_create(
                user=self.user, name=data["name"], team=data["team"], **self.given(data, POOL_CREATE_FIELDS)
            )
        changes = self.given(data, pool_services.UPDATABLE_FIELDS)
        pool = pool_services.pool_update(user=self.user, pool=self.instance, **changes) if changes else self.instance
        if "replicas" in self.changed_data:
            pool = pool_services.pool_scale(user=self.user, pool=pool, replicas=data["replicas"])
        return pool


@admin.register(ServingPool)
class ServingPoolAdmin(ServiceAdmin):
    list_display = [
        "name",
        "team",
        "driver",
        "replicas",
        "device_kind",
        "status",
        "cost_per_replica_hour",
        "updated_at",
    ]
    list_filter = ["driver", "status", "device_kind", "team"]
    search_fields = ["name"]
    form = PoolForm
    readonly_fields = [
        "status",
        "status_reason",
        "generation",
        "model_repository",
        "created_by",
        "created_at",
        "updated_at",
    ]
    inlines = [PoolReplicaInline, PoolModelInline]
    actions = ["reconcile", "delete_pools"]

    def get_readonly_fields(self, request, obj=None):
        if obj is None:  # adding: pool_create validates every field
            return ["status", "status_reason", "generation", "created_by", "created_at", "updated_at"]
        fixed = ["name", "team", "driver", "device_kind", "gpus_per_replica", "namespace"]
        if obj.driver != "kubernetes":  # what pool_update refuses for a local pool is not offered
            fixed += list(pool_services.KUBERNETES_ONLY)
        return [*fixed, *self.readonly_fields]

    def get_inlines(self, request, obj):
        return self.inlines if obj is not None else []

    def has_delete_permission(self, request, obj=None):
        return False  # deleting stops processes: the "delete pools" action goes through the service

    @admin.action(description="Reconcile replicas now")
    def reconcile(self, request, queryset):
        from deployments.tasks import pool_reconcile_task

        for pool in queryset:
            pool_reconcile_task.delay(pool.pk)
        self.message_user(request, f"Reconcile queued for {queryset.count()} pool(s).")

    @admin.action(description="Delete pools (stop replicas)")
    def delete_pools(self, request, queryset):
        for pool in queryset:
            try:
                pool_services.pool_delete(user=request.user, pool=pool)
            except PlatformError as exc:
                self.message_user(request, f"{pool.name}: {exc.detail}", messages.ERROR)


class PoolSecretBindingForm(ServiceForm):
    def call_service(self, data):
        if self.instance.pk is not None:  # a binding is added or removed, never edited
            return self.instance
        return pool_secret_services.pool_secret_bind(
            user=self.user, team=data["team"], namespace=data.get("namespace", ""), secret_name=data["secret_name"]
        )


@admin.register(PoolSecretBinding)
class PoolSecretBindingAdmin(ServiceAdmin):
    """Which Kubernetes Secret a team's pools may name as repository_secret, per namespace
    (deployments/pool_policy.py). Added and removed through the same service as the API."""

    form = PoolSecretBindingForm
    list_display = ["secret_name", "namespace", "team", "created_by", "created_at"]
    list_filter = ["team", "namespace"]
    search_fields = ["secret_name", "namespace"]
    actions = ["unbind"]

    def get_readonly_fields(self, request, obj=None):
        fixed = ["created_by", "created_at"]
        return fixed if obj is None else ["team", "namespace", "secret_name", *fixed]

    def has_delete_permission(self, request, obj=None):
        return False  # unbinding checks that no pool names the Secret: the "unbind" action

    @admin.action(description="Unbind (when no pool names the Secret)")
    def unbind(self, request, queryset):
        for binding in queryset.select_related("team"):
            try:
                pool_secret_services.pool_secret_unbind(user=request.user, binding=binding)
            except PlatformError as exc:
                self.message_user(request, f"{binding}: {exc.detail}", messages.ERROR)


class EndpointForm(ServiceForm):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name in LLM_FIELDS:  # LLM settings: empty takes the default (and a tensor endpoint has none)
            if name in self.fields:
                self.fields[name].required = False
        if "capture_share" in self.fields:  # empty: the endpoint captures nothing (the model's default)
            self.fields["capture_share"].required = False

    def call_service(self, data):
        kind = data.get("kind") or getattr(self.instance, "kind", None) or "tensor"
        values = {
            f: data[f]
            for f in endpoint_services.ENDPOINT_FIELDS
            if f in data
            and not (f in LLM_FIELDS and (kind != "llm" or data[f] in (None, "")))
            and not (f == "capture_share" and data[f] is None)
        }
        if self.instance.pk is None:  # endpoint_create loads the stable on the pool
            return endpoint_services.endpoint_create(
                user=self.user,
                name=data["name"],
                pool=data["pool"],
                stable_artifact=data.get("stable_artifact"),
                kind=kind,
                **values,
            )
        changes = {f: v for f, v in self.given(data, endpoint_services.ENDPOINT_FIELDS).items() if f in values}
        return endpoint_services.endpoint_update(user=self.user, endpoint=self.instance, **changes)


@admin.register(Endpoint)
class EndpointAdmin(ServiceAdmin):
    form = EndpointForm
    list_display = ["name", "team", "pool", "public", "stable_artifact", "slo_p99_ms", "slo_error_rate", "updated_at"]
    list_filter = ["team", "pool", "public"]
    search_fields = ["name"]
    readonly_fields = ["name", "team", "kind", "pool", "stable_artifact", "created_by", "created_at", "updated_at"]
    raw_id_fields = ["stable_artifact"]

    def get_readonly_fields(self, request, obj=None):
        if obj is None:  # the team is the pool's; the stable changes later only by rollout
            return ["team", "created_by", "created_at", "updated_at"]
        return self.readonly_fields


def _action(service, label):
    def run(modeladmin, request, queryset):
        for rollout in queryset.select_related("endpoint", "endpoint__team"):
            try:
                service(user=request.user, rollout=rollout, reason=f"{label} from the admin console")
            except PlatformError as exc:
                modeladmin.message_user(request, f"#{rollout.pk}: {exc.detail}", messages.WARNING)
            else:
                modeladmin.message_user(request, f"#{rollout.pk}: {label} done.")

    run.__name__ = f"rollout_{label.replace(' ', '_')}"
    return admin.action(description=f"{label.capitalize()} selected rollouts")(run)


@admin.register(Rollout)
class RolloutAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "endpoint",
        "candidate_artifact",
        "state",
        "step_index",
        "generation",
        "created_by",
        "created_at",
        "finished_at",
    ]
    list_filter = ["state", "strategy", "endpoint"]
    search_fields = ["endpoint__name", "reason"]
    readonly_fields = [f.name for f in Rollout._meta.fields]
    actions = [
        _action(rollout_services.rollout_promote, "promote"),
        _action(rollout_services.rollout_pause, "pause"),
        _action(rollout_services.rollout_resume, "resume"),
        _action(rollout_services.rollout_rollback, "roll back"),
    ]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(InferenceKey)
class InferenceKeyAdmin(admin.ModelAdmin):
    """Keys are created in the API or the dashboard (the secret is shown once there);
    here they are listed and revoked through the same service."""

    list_display = [
        "name",
        "team",
        "prefix",
        "all_endpoints",
        "rate_per_s",
        "burst",
        "max_concurrency",
        "created_by",
        "created_at",
        "revoked_at",
    ]
    list_filter = ["team", ("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["name", "prefix"]
    readonly_fields = [f.name for f in InferenceKey._meta.fields] + ["endpoints"]
    exclude = ["sha256"]
    actions = ["revoke"]

    def get_readonly_fields(self, request, obj=None):
        return [f for f in self.readonly_fields if f != "sha256"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False  # limits and scope are set at creation; rotate by creating another key

    def has_delete_permission(self, request, obj=None):
        return False  # revoking keeps the audit trail; a deleted row would not

    @admin.action(description="Revoke selected keys")
    def revoke(self, request, queryset):
        for key in queryset.select_related("team"):
            try:
                key_services.inference_key_revoke(user=request.user, key=key, reason="revoked from the admin console")
            except PlatformError as exc:
                self.message_user(request, f"{key}: {exc.detail}", messages.ERROR)
            else:
                self.message_user(request, f"{key}: revoked.")
