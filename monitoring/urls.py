app_name = "monitoring"
urlpatterns = []
