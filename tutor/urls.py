from django.urls import path

from tutor import views

app_name = "tutor"
urlpatterns = [
    path("", views.index, name="index"),
    path("start/", views.start, name="start"),
    path("continue/<slug:slug>/<int:number>/", views.continue_from, name="continue"),
    path("<slug:slug>/", views.session_page, name="session"),
    path("<slug:slug>/say/", views.say, name="say"),
    path("<slug:slug>/submit/", views.submit, name="submit"),
    path("<slug:slug>/retry/", views.retry, name="retry"),
    path("<slug:slug>/publish/", views.publish, name="publish"),
    path("<slug:slug>/unpublish/", views.unpublish, name="unpublish"),
    path("<slug:slug>/title/", views.rename, name="rename"),
]
