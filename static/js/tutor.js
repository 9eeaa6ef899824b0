// The guided session page: posts messages and submissions, reads the reply as
// server-sent events from the POST's body, and shows it as it arrives. Without this
// script the forms still work: the server runs the exchange and shows the page again.
(function () {
  "use strict";

  var root = document.getElementById("tutor");
  if (!root) return;

  var turns = document.getElementById("turns");
  var live = document.getElementById("live");
  var liveText = live.querySelector(".live-text");
  var errorBox = document.getElementById("error-box");
  var errorText = errorBox.querySelector(".error-text");
  var retryForm = document.getElementById("retry-form");
  var runPanel = document.getElementById("run-panel");
  var usage = document.getElementById("usage");
  var composer = document.getElementById("composer");
  var editorForm = document.getElementById("editor-form");
  var editor = document.getElementById("editor");
  var hostEditor = document.getElementById("host-editor");
  var lastSubmitted = document.getElementById("last-submitted");
  var online = root.getAttribute("data-online") === "1";
  var busy = false;

  function setBusy(value) {
    busy = value;
    document.querySelectorAll("#tutor button[type=submit]").forEach(function (button) {
      button.disabled = value;
    });
  }

  function showError(message, canRetry) {
    errorText.textContent = message;
    errorBox.hidden = false;
    if (retryForm) retryForm.hidden = !(canRetry && online);
    errorBox.scrollIntoView({ block: "nearest" });
  }

  function hideError() {
    errorBox.hidden = true;
  }

  function removePendingNote() {
    var note = document.getElementById("pending-note");
    if (note) note.remove();
  }

  function fromHTML(html) {
    // Our own templates render this from stored, sanitised turns.
    var template = document.createElement("template");
    template.innerHTML = html.trim();
    return template.content.firstElementChild;
  }

  function putTurn(data) {
    var element = fromHTML(data.html);
    var existing = turns.querySelector('[data-turn="' + data.number + '"]');
    if (existing) existing.replaceWith(element);
    else turns.appendChild(element);
    if (data.replaces_live) {
      live.hidden = true;
      liveText.textContent = "";
    }
    element.scrollIntoView({ block: "nearest" });
  }

  var handlers = {
    turn: function (data, context) {
      putTurn(data);
      if (data.role === "learner" && context.clear) {
        context.clear.value = "";
        context.clear = null;
      }
    },
    running: function (data) {
      runPanel.innerHTML = data.html;
      // A new version becomes one to compare later submissions with.
      var compare = document.getElementById("compare-with");
      if (compare && hostEditor && data.version && data.comparable &&
          !compare.querySelector('option[value="' + data.version + '"]')) {
        var option = document.createElement("option");
        option.value = String(data.version);
        option.textContent = "v" + data.version;
        compare.insertBefore(option, compare.options[1] || null);
      }
      if (data.version && lastSubmitted) {
        lastSubmitted.textContent = "last submitted: v" + data.version;
      }
    },
    run: function (data) {
      runPanel.innerHTML = data.html;
      document.querySelectorAll('.kernel-badge[data-version="' + data.version_id + '"]')
        .forEach(function (badge) {
          badge.className = badge.className.replace(/\bstatus-\S+/, "status-" + data.status);
          var label = badge.querySelector(".badge-status");
          if (label) label.textContent = data.status_label;
        });
      // The editor (static/src/editor.js) marks this run's error at its line.
      var panel = runPanel.querySelector("[data-marks]");
      if (editor && panel) {
        editor.dispatchEvent(
          new CustomEvent("kernelbin:marks", { detail: JSON.parse(panel.dataset.marks) })
        );
      }
      if (hostEditor && panel && panel.dataset.hostMarks) {
        hostEditor.dispatchEvent(
          new CustomEvent("kernelbin:marks", { detail: JSON.parse(panel.dataset.hostMarks) })
        );
      }
    },
    start: function () {
      liveText.textContent = "";
      live.hidden = false;
      live.scrollIntoView({ block: "nearest" });
    },
    delta: function (data) {
      liveText.appendChild(document.createTextNode(data.text));
      live.scrollIntoView({ block: "nearest" });
    },
    error: function (data, context) {
      context.ended = true;
      live.hidden = true;
      liveText.textContent = "";
      showError(data.message, data.retry);
    },
    done: function (data, context) {
      context.ended = true;
      live.hidden = true;
      if (data.usage_html && usage) usage.innerHTML = data.usage_html;
      var objectives = document.getElementById("objectives");
      if (data.objectives_html && objectives) objectives.replaceWith(fromHTML(data.objectives_html));
      hideError();
      removePendingNote();
    },
  };

  function dispatch(block, context) {
    var name = "message";
    var lines = [];
    block.split("\n").forEach(function (line) {
      if (line.indexOf("event:") === 0) name = line.slice(6).trim();
      else if (line.indexOf("data:") === 0) lines.push(line.slice(5).replace(/^ /, ""));
    });
    if (!lines.length || !handlers[name]) return;
    handlers[name](JSON.parse(lines.join("\n")), context);
  }

  function refusal(response) {
    if (response.status === 403) {
      return Promise.resolve(
        "The page is out of date (its security token expired). Reload the page and try again."
      );
    }
    return response
      .json()
      .then(function (body) {
        return body.error || "The server refused the request (" + response.status + ").";
      })
      .catch(function () {
        return "The server answered with an error (" + response.status + "). Try again.";
      });
  }

  function post(form, url, clear) {
    if (busy) return;
    setBusy(true);
    hideError();
    var context = { clear: clear, ended: false };
    fetch(url, {
      method: "POST",
      body: new FormData(form),
      headers: { Accept: "text/event-stream" },
      credentials: "same-origin",
    })
      .then(function (response) {
        var type = response.headers.get("Content-Type") || "";
        if (!response.ok || type.indexOf("text/event-stream") !== 0) {
          return refusal(response).then(function (message) {
            showError(message, false);
          });
        }
        var reader = response.body.getReader();
        var decoder = new TextDecoder();
        var buffer = "";
        function pump() {
          return reader.read().then(function (chunk) {
            if (chunk.done) return;
            buffer += decoder.decode(chunk.value, { stream: true });
            var end;
            while ((end = buffer.indexOf("\n\n")) !== -1) {
              dispatch(buffer.slice(0, end), context);
              buffer = buffer.slice(end + 2);
            }
            return pump();
          });
        }
        return pump().then(function () {
          if (!context.ended) {
            live.hidden = true;
            showError(
              "The connection ended before the reply was complete. Your message is saved; " +
                "reload the page to see where things stand.",
              true
            );
          }
        });
      })
      .catch(function () {
        live.hidden = true;
        showError(
          "Lost the connection to the server. Anything the server received is saved; " +
            "reload the page to see where things stand.",
          true
        );
      })
      .then(function () {
        setBusy(false);
      });
  }

  if (composer) {
    var message = composer.querySelector("textarea");
    composer.addEventListener("submit", function (event) {
      event.preventDefault();
      if (!message.value.trim()) return;
      post(composer, root.getAttribute("data-say-url"), message);
    });
    message.addEventListener("keydown", function (event) {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
        event.preventDefault();
        composer.requestSubmit();
      }
    });
  }

  if (editorForm) {
    var note = editorForm.querySelector("input[name=note]");
    editorForm.addEventListener("submit", function (event) {
      event.preventDefault();
      post(editorForm, root.getAttribute("data-submit-url"), note);
    });
    // Ctrl+Enter (Cmd+Enter) submits and runs from anywhere on the page but the message
    // box, where it sends the message. The code editor takes it itself first.
    document.addEventListener("keydown", function (event) {
      if (event.key !== "Enter" || !(event.ctrlKey || event.metaKey) || event.defaultPrevented) {
        return;
      }
      if (composer && composer.contains(event.target)) return;
      event.preventDefault();
      editorForm.requestSubmit();
    });
  }

  document.querySelectorAll(".retry-form").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      post(form, root.getAttribute("data-retry-url"), null);
    });
  });
})();
