from django.urls import path

from experiments import views
from experiments.online import views as online_views

app_name = "experiments"
urlpatterns = [
    path("", online_views.online_experiment_list, name="online-list"),
    path("<int:experiment_id>/", online_views.online_experiment_detail, name="online-detail"),
    # MLflow training runs (moved here when online experiments took /experiments/).
    path("training/", views.experiment_list, name="experiment-list"),
    path("training/<str:experiment_id>/", views.experiment_detail, name="experiment-detail"),
]
