from django.urls import path

from sessions import views

app_name = "sessions"
urlpatterns = [
    path("", views.index, name="index"),
    # Browsers and crawlers ask for /favicon.ico whatever a page names.
    path("favicon.ico", views.favicon),
    path("oembed/", views.oembed, name="oembed"),
    path("import/", views.import_session, name="import"),
    path("s/<slug:slug>/", views.detail, name="detail"),
    path("s/<slug:slug>/embed/", views.embed, name="embed"),
    path("s/<slug:slug>/search/", views.session_search, name="search"),
    path("s/<slug:slug>/files/", views.session_files, name="files"),
    path("s/<slug:slug>/export.json", views.export_json, name="export_json"),
    path("s/<slug:slug>/export.md", views.export_md, name="export_md"),
    path("s/<slug:slug>/images/<str:name>", views.image, name="image"),
]
