"""REST API v1 for LLM versions and provider secrets, thin over
registry/services/llm.py:

- POST /api/v1/models/{name}/llm-versions/: an uploaded model directory (multipart
  `archive`: .tar.gz/.tgz/.tar/.zip of a Hugging Face format directory) or a backend
  reference (JSON: base_url, upstream_model, secret); the reply is the version with its
  `llm` spec and the id of its one artifact (what endpoints and rollouts take).
- /api/v1/secrets/: a team's provider secrets. The value is in the create reply only
  (Cache-Control: no-store); lists and details show name, team, origins, dates and at most
  the last 4 characters. Another team's secret is a 404 like an unknown one. `origins` (the
  scheme://host[:port] the value may be sent to) are bound when the secret is stored.
"""

from django.contrib.auth.models import Group
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, parsers, serializers

from kernel.api import created
from kernel.parsers import StrictJSONParser
from kernel.serializers import StrictCharField, StrictModelSerializer
from kernel.viewsets import TeamScopedViewSet
from registry.api.catalog import VersionSerializer, _check_request_size
from registry.models import ProviderSecret
from registry.parsers import StrictMultiPartParser
from registry.selectors import catalog as catalog_selectors
from registry.selectors import llm as selectors
from registry.selectors.teams import team_list
from registry.services import llm as services


class LLMVersionCreateSerializer(serializers.Serializer):
    archive = serializers.FileField(
        required=False,
        help_text="Kind (a): a .tar.gz, .tgz, .tar or .zip of a Hugging Face format model directory "
        "(config.json, *.safetensors, tokenizer files). Pickle weights (*.bin, *.pt, ...) are refused.",
    )
    base_url = StrictCharField(
        required=False,
        max_length=2000,
        help_text="Kind (b): the OpenAI-compatible server's base URL, e.g. http://host:8000/v1.",
    )
    upstream_model = StrictCharField(required=False, max_length=256, help_text="Kind (b): the model id sent upstream.")
    secret = StrictCharField(
        required=False,
        max_length=64,
        help_text="Kind (b): name of a provider secret of the model's team (its bearer key).",
    )
    context_length = serializers.IntegerField(
        required=False,
        help_text="Tokens (prompt + completion); (a) default and upper bound: config.json's; (b) default 4096.",
    )
    tokenizer = StrictCharField(
        required=False, allow_blank=True, max_length=200, help_text="Kind (b): the tokenizer's name (e.g. gpt2)."
    )
    cost_per_1k_prompt = serializers.FloatField(required=False, default=0.0)
    cost_per_1k_completion = serializers.FloatField(required=False, default=0.0)
    delay_first_token_ms = serializers.IntegerField(
        required=False,
        default=0,
        help_text="Kind (a): a deliberately slower model (tests, demos): delay before the first token.",
    )
    delay_per_token_ms = serializers.IntegerField(
        required=False, default=0, help_text="Kind (a): delay per token after it."
    )
    metrics = serializers.JSONField(required=False)
    tags = serializers.JSONField(required=False)

    def validate(self, attrs):
        if bool(attrs.get("archive")) == bool(attrs.get("base_url")):
            raise serializers.ValidationError(
                {"archive": "Give exactly one of archive (a model directory, multipart) or base_url (a backend)."}
            )
        if attrs.get("base_url") and not attrs.get("upstream_model"):
            raise serializers.ValidationError({"upstream_model": "A backend reference needs upstream_model."})
        for key in ("metrics", "tags"):
            if key in attrs and not isinstance(attrs[key], dict):
                raise serializers.ValidationError({key: "Must be a JSON object."})
        return attrs


class LLMVersionSerializer(VersionSerializer):
    artifact = serializers.SerializerMethodField(help_text="The version's one artifact (llm or llm-backend).")

    class Meta(VersionSerializer.Meta):
        fields = [*VersionSerializer.Meta.fields, "artifact"]
        read_only_fields = fields

    def get_artifact(self, version) -> int | None:
        artifact = version.artifacts.order_by("pk").first()
        return artifact.pk if artifact else None


class LLMVersionViewSet(mixins.CreateModelMixin, TeamScopedViewSet):
    """/api/v1/models/{name}/llm-versions/."""

    serializer_class = LLMVersionSerializer
    parser_classes = [StrictMultiPartParser, parsers.FormParser, StrictJSONParser]

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        if request.method == "POST":
            _check_request_size(request)

    def scoped_queryset(self, user):
        return catalog_selectors.version_list(user=user)

    @extend_schema(
        request={"multipart/form-data": LLMVersionCreateSerializer, "application/json": LLMVersionCreateSerializer},
        responses={201: LLMVersionSerializer},
        summary="Register an LLM version: a model directory archive (multipart `archive`) or a backend reference",
    )
    def create(self, request, *args, **kwargs):
        model = catalog_selectors.model_get(user=request.user, name=self.kwargs["model_name"])
        payload = LLMVersionCreateSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        common = {
            "context_length": data.get("context_length"),
            "cost_per_1k_prompt": data["cost_per_1k_prompt"],
            "cost_per_1k_completion": data["cost_per_1k_completion"],
            "metrics": data.get("metrics"),
            "tags": data.get("tags"),
        }
        if data.get("archive"):
            upload = data["archive"]
            version = services.llm_version_create_from_archive(
                user=request.user,
                model=model,
                filename=upload.name,
                chunks=upload.chunks(),
                size=upload.size,
                delay_first_token_ms=data["delay_first_token_ms"],
                delay_per_token_ms=data["delay_per_token_ms"],
                **common,
            )
        else:
            version = services.llm_version_create_backend(
                user=request.user,
                model=model,
                base_url=data["base_url"],
                upstream_model=data["upstream_model"],
                secret=data.get("secret") or None,
                tokenizer=data.get("tokenizer", ""),
                **common,
            )
        version = catalog_selectors.version_list(user=request.user).get(pk=version.pk)
        return created(LLMVersionSerializer(version, context=self.get_serializer_context()).data)


# --- provider secrets ----------------------------------------------------------------------
class SecretSerializer(StrictModelSerializer):
    team = serializers.SlugRelatedField(slug_field="name", read_only=True)
    gateway_id = StrictCharField(read_only=True, help_text="Its id in the route table (backend.secret).")
    created_by = serializers.StringRelatedField()

    class Meta:
        model = ProviderSecret
        fields = ["id", "gateway_id", "name", "team", "origins", "last4", "created_by", "created_at"]
        read_only_fields = fields


class SecretCreatedSerializer(SecretSerializer):
    value = StrictCharField(read_only=True, help_text="The value sent: shown this once, never again.")

    class Meta(SecretSerializer.Meta):
        fields = [*SecretSerializer.Meta.fields, "value"]
        read_only_fields = fields


class SecretCreateSerializer(serializers.Serializer):
    team = StrictCharField(max_length=150, help_text="Name of one of your teams (you need its admin role).")
    name = StrictCharField(max_length=64)
    value = StrictCharField(max_length=4096, trim_whitespace=False, help_text="The provider's API key.")
    origins = serializers.ListField(
        child=StrictCharField(max_length=2000),
        min_length=1,
        max_length=8,
        help_text="Where the value may be sent: origins (scheme://host[:port]) of the backends that may name it, "
        "e.g. https://api.openai.com. A backend at another origin may not name the secret.",
    )

    def validate_team(self, value: str) -> Group:
        request = self.context.get("request")
        team = team_list(user=request.user).filter(name=value).first() if request is not None else None
        if team is None:
            raise serializers.ValidationError(f"You are in no team named {value[:150]!r}.", code="team_not_found")
        return team


@extend_schema_view(
    list=extend_schema(summary="Provider secrets of your teams (names only, never a value)"),
    retrieve=extend_schema(summary="One provider secret (name, last 4 characters at most)"),
    create=extend_schema(
        request=SecretCreateSerializer,
        responses={201: SecretCreatedSerializer},
        summary="Store a provider secret (encrypted at rest); the reply shows its value this once",
    ),
    destroy=extend_schema(summary="Delete a secret no LLM version names (409 otherwise)"),
)
class SecretViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    TeamScopedViewSet,
):
    serializer_class = SecretSerializer
    ordering = ["name"]
    filterset_fields = ["name"]

    def scoped_queryset(self, user):
        return selectors.secret_list(user=user)

    def create(self, request, *args, **kwargs):
        payload = SecretCreateSerializer(data=request.data, context=self.get_serializer_context())
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        secret = services.secret_create(
            user=request.user, team=data["team"], name=data["name"], value=data["value"], origins=data["origins"]
        )
        body = SecretCreatedSerializer(secret).data
        body["value"] = data["value"]
        response = created(body)
        response["Cache-Control"] = "no-store"
        return response

    def perform_destroy(self, instance):
        services.secret_delete(user=self.request.user, secret=instance)
