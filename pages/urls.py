"""Every page of the archive and its replays. Two namespaces, kept as they were when the
views lived in their apps: templates and links in the wild name `sessions:…` and
`kernels:…`."""

from django.urls import include, path

from pages import (
    card_views,
    embed_views,
    fork_views,
    replay_views,
    session_views,
    whole_buffer_views,
)

session_patterns = [
    path("", session_views.index, name="index"),
    # Browsers and crawlers ask for /favicon.ico whatever a page names.
    path("favicon.ico", session_views.favicon),
    path("oembed/", session_views.oembed, name="oembed"),
    path("import/", session_views.import_session, name="import"),
    path("s/<slug:slug>/", session_views.detail, name="detail"),
    path("s/<slug:slug>/embed/", session_views.embed, name="embed"),
    path("s/<slug:slug>/search/", session_views.session_search, name="search"),
    path("s/<slug:slug>/files/", session_views.session_files, name="files"),
    path("uploads/<uuid:upload_id>/", session_views.upload_page, name="upload"),
    path("s/<slug:slug>/export.json", session_views.export_json, name="export_json"),
    path("s/<slug:slug>/export.md", session_views.export_md, name="export_md"),
    path("s/<slug:slug>/images/<str:name>", session_views.image, name="image"),
]

replay_patterns = [
    path("s/<slug:slug>/turns/<int:number>/replay/", replay_views.replay_page, name="replay"),
    path(
        "s/<slug:slug>/turns/<int:number>/replay.json",
        replay_views.replay_json,
        name="replay_json",
    ),
    path(
        "s/<slug:slug>/turns/<int:number>/replay/embed/",
        embed_views.replay_embed,
        name="replay_embed",
    ),
    path(
        "s/<slug:slug>/turns/<int:number>/replay/whole/",
        whole_buffer_views.ask_turn,
        name="whole_buffer",
    ),
    path(
        "s/<slug:slug>/turns/<int:number>/replay/whole.npy",
        whole_buffer_views.download_turn,
        name="whole_buffer_npy",
    ),
    path("s/<slug:slug>/turns/<int:number>/fork/", fork_views.fork, name="fork_turn"),
    path("f/<slug:fork_id>/", fork_views.fork_page, name="fork"),
    path("f/<slug:fork_id>/replay.json", fork_views.fork_json, name="fork_json"),
    path("f/<slug:fork_id>/embed/", fork_views.fork_embed, name="fork_embed"),
    path("f/<slug:fork_id>/whole/", whole_buffer_views.ask_fork, name="fork_whole_buffer"),
    path(
        "f/<slug:fork_id>/whole.npy",
        whole_buffer_views.download_fork,
        name="fork_whole_buffer_npy",
    ),
    path("s/<slug:slug>/kernels/<slug:name>/", replay_views.timeline, name="timeline"),
    path("s/<slug:slug>/card.png", card_views.session_card, name="session_card"),
    path("s/<slug:slug>/turns/<int:number>/card.png", card_views.turn_card, name="turn_card"),
    path("f/<slug:fork_id>/card.png", card_views.fork_card, name="fork_card"),
    path("demo/digits/", replay_views.digits, name="digits"),
]

urlpatterns = [
    path("", include((session_patterns, "sessions"))),
    path("", include((replay_patterns, "kernels"))),
]
