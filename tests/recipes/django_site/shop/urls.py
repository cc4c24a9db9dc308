from django.urls import path

from shop import views

urlpatterns = [path("cart/<int:user_id>/checkout", views.checkout)]
