from django.urls import path

from kernels import views

app_name = "kernels"
urlpatterns = [
    path("s/<slug:slug>/turns/<int:number>/replay/", views.replay_page, name="replay"),
    path("s/<slug:slug>/turns/<int:number>/replay.json", views.replay_json, name="replay_json"),
    path("s/<slug:slug>/kernels/<slug:name>/", views.timeline, name="timeline"),
    path("demo/digits/", views.digits, name="digits"),
]
