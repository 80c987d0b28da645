app_name = "experiments"
urlpatterns = []
