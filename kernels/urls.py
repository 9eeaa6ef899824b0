from django.urls import path

from kernels import card_views, embed_views, fork_views, views

app_name = "kernels"
urlpatterns = [
    path("s/<slug:slug>/turns/<int:number>/replay/", views.replay_page, name="replay"),
    path("s/<slug:slug>/turns/<int:number>/replay.json", views.replay_json, name="replay_json"),
    path(
        "s/<slug:slug>/turns/<int:number>/replay/embed/",
        embed_views.replay_embed,
        name="replay_embed",
    ),
    path("s/<slug:slug>/turns/<int:number>/fork/", fork_views.fork, name="fork_turn"),
    path("f/<slug:fork_id>/", fork_views.fork_page, name="fork"),
    path("f/<slug:fork_id>/replay.json", fork_views.fork_json, name="fork_json"),
    path("f/<slug:fork_id>/embed/", fork_views.fork_embed, name="fork_embed"),
    path("s/<slug:slug>/kernels/<slug:name>/", views.timeline, name="timeline"),
    path("s/<slug:slug>/card.png", card_views.session_card, name="session_card"),
    path("s/<slug:slug>/turns/<int:number>/card.png", card_views.turn_card, name="turn_card"),
    path("f/<slug:fork_id>/card.png", card_views.fork_card, name="fork_card"),
    path("demo/digits/", views.digits, name="digits"),
]
