app_name = "deployments"
urlpatterns = []
