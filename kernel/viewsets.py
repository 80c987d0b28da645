from rest_framework import viewsets


class TeamScopedViewSet(viewsets.GenericViewSet):
    """Base for every API viewset over team-owned objects.

    Subclasses set `scoped_queryset(user)` (a selector); list, retrieve, update and
    delete all go through it, so an object of another team is a 404, never a 403.
    """

    def scoped_queryset(self, user):  # pragma: no cover - abstract
        raise NotImplementedError

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation has no user or URL kwargs
            return self.get_serializer_class().Meta.model.objects.none()
        return self.scoped_queryset(self.request.user)
