// easel dashboard: the little script it needs besides htmx. Everything works without it but
// the copy buttons, the playground's key being filled in, dropping or pasting images on Create,
// and the region editor (its own script, assets/region.js).
document.addEventListener("click", function (e) {
  var b = e.target.closest("[data-copy], [data-copy-text]");
  if (!b || !navigator.clipboard) return;
  var text = b.getAttribute("data-copy-text");
  if (text === null) {
    var el = document.getElementById(b.getAttribute("data-copy"));
    if (!el) return;
    text = el.textContent.trim();
  }
  navigator.clipboard.writeText(text).then(function () {
    b.textContent = "Copied";
  });
});
// Create: the chosen model's limits as the hints of Steps and Guidance.
document.addEventListener("change", function (e) {
  if (!e.target || e.target.id !== "c-model") return;
  var o = e.target.selectedOptions[0];
  [["c-steps", "data-steps"], ["c-cfg", "data-cfg"]].forEach(function (f) {
    var field = document.getElementById(f[0]);
    if (field) field.placeholder = (o && o.getAttribute(f[1])) || "";
  });
});
// Create: images dropped on the form or pasted into it join its file field (the form sends
// them as it sends chosen files).
(function () {
  function add(form, files) {
    var input = form.querySelector("input[type=file]");
    var images = Array.prototype.filter.call(files || [], function (f) {
      return /^image\//.test(f.type);
    });
    if (!input || !images.length || !window.DataTransfer) return false;
    var all = new DataTransfer();
    Array.prototype.forEach.call(input.files, function (f) { all.items.add(f); });
    images.forEach(function (f) { all.items.add(f); });
    input.files = all.files;
    var note = form.querySelector("[data-drop-note]");
    if (note) note.textContent = input.files.length + " image(s) added.";
    return true;
  }
  document.addEventListener("dragover", function (e) {
    var form = e.target.closest && e.target.closest("[data-drop]");
    if (!form) return;
    e.preventDefault();
    form.classList.add("dropping");
  });
  document.addEventListener("dragleave", function (e) {
    var form = e.target.closest && e.target.closest("[data-drop]");
    if (form) form.classList.remove("dropping");
  });
  document.addEventListener("drop", function (e) {
    var form = e.target.closest && e.target.closest("[data-drop]");
    if (!form) return;
    e.preventDefault();
    form.classList.remove("dropping");
    add(form, e.dataTransfer && e.dataTransfer.files);
  });
  document.addEventListener("paste", function (e) {
    var form = e.target.closest && e.target.closest("[data-drop]");
    if (form && add(form, e.clipboardData && e.clipboardData.files)) e.preventDefault();
  });
})();
// A key just created is kept for this tab only (sessionStorage), for the playground's form.
document.addEventListener("DOMContentLoaded", function () {
  var created = document.querySelector("[data-testid=new-key]");
  if (created) sessionStorage.setItem("easel-key", created.textContent.trim());
  var field = document.getElementById("pg-key");
  var kept = sessionStorage.getItem("easel-key");
  if (field && kept && !field.value) field.value = kept;
});
// Live tasks: a task's progress section (data-live) and the tasks list (data-live-list) follow
// the dashboard's Server-Sent Events (/tasks/{id}/events, /tasks/events), opened with the
// session. Without this script the pages show the state as of their last load.
(function () {
  var FINAL = { finished: true, failed: true, canceled: true };
  // A stream refused (past the open-stream limits) or gone: the page's state is read this
  // often instead, until a stream opens again.
  var FALLBACK_MS = 5000;

  function setStatus(el, status) {
    if (!el || !status) return;
    el.textContent = status;
    el.className = "status status-" + status;
  }

  function showProgress(section, data) {
    setStatus(section.querySelector("[data-status]"), data.status);
    var pct = parseInt(data.percentage, 10);
    if (!isNaN(pct)) {
      var bar = section.querySelector("[data-bar]");
      if (bar) {
        bar.value = pct;
        bar.textContent = pct + "%";
      }
      var text = section.querySelector("[data-percent]");
      if (text) text.textContent = pct + "%";
    }
    var queue = section.querySelector("[data-queue]");
    if (queue) {
      var waiting = data.status === "pending" || data.status === "starting";
      queue.textContent =
        waiting && typeof data.queue_position === "number"
          ? "queued, " + data.queue_position + " ahead"
          : "";
    }
    // A running task whose backend failed waits for it: said until a backend takes it again
    // (a later progress event or record without `retrying`).
    var retrying = section.querySelector("[data-retrying]");
    if (retrying) {
      var r = data.status === "processing" && data.retrying;
      retrying.textContent = r
        ? "Waiting for the backend, retry " + r.attempt + ": " + r.error
        : "";
    }
    var box = section.querySelector("[data-preview-box]");
    if (box && data.preview_image_url) {
      var img = box.querySelector("img[data-preview]");
      if (!img) {
        img = document.createElement("img");
        img.setAttribute("data-preview", "");
        img.alt = "A preview of the image being drawn";
        box.appendChild(img);
      }
      if (img.getAttribute("src") !== data.preview_image_url) img.src = data.preview_image_url;
    }
  }

  // Replace the section with the server's rendering of the task as it is now.
  function reread(section, then) {
    fetch("/tasks/" + section.getAttribute("data-task") + "/progress", {
      credentials: "same-origin",
      headers: { Accept: "text/html" },
    })
      .then(function (r) {
        if (!r.ok || r.redirected) throw new Error("HTTP " + r.status);
        return r.text();
      })
      .then(function (html) {
        var t = document.createElement("template");
        t.innerHTML = html.trim();
        var fresh = t.content.firstElementChild;
        if (!fresh || !section.parentNode) return;
        section.parentNode.replaceChild(fresh, section);
        if (window.htmx) window.htmx.process(fresh);
        follow(fresh);
        // An ended task (its fresh section no longer live) cannot be canceled: its form goes.
        if (!fresh.hasAttribute("data-live")) {
          var task = fresh.getAttribute("data-task");
          document.querySelectorAll('form[action="/tasks/' + task + '/cancel"]').forEach(function (f) {
            f.remove();
          });
        }
      })
      .catch(function () {
        if (then) then();
      });
  }

  function follow(section) {
    var url = section.getAttribute("data-live");
    if (!url || section.easelStream || !window.EventSource) return;
    var es = new EventSource(url);
    section.easelStream = es;
    es.addEventListener("progress", function (e) {
      showProgress(section, JSON.parse(e.data));
    });
    es.addEventListener("task", function (e) {
      var record = JSON.parse(e.data);
      showProgress(section, record);
      if (FINAL[record.status]) {
        es.close();
        reread(section);
      }
    });
    es.onerror = function () {
      // EventSource reconnects by itself (with Last-Event-ID) after a broken connection;
      // closed means it was refused: read the page's state now and then instead.
      if (es.readyState !== EventSource.CLOSED) return;
      section.easelStream = null;
      var retry = function () {
        if (document.contains(section)) reread(section, function () {
          setTimeout(retry, FALLBACK_MS);
        });
      };
      setTimeout(retry, FALLBACK_MS);
    };
  }

  function followList(list) {
    var url = list.getAttribute("data-live-list");
    // Only rows of tasks that have not ended change; with none, no stream is opened.
    if (!url || list.easelStream || !window.EventSource) return;
    if (!list.querySelector("[data-running]")) return;
    var es = new EventSource(url);
    list.easelStream = es;
    function update(data) {
      var row = list.querySelector('[data-task="' + data.task_id + '"]');
      if (!row) return;
      setStatus(row.querySelector("[data-status]"), data.status);
      var pct = row.querySelector("[data-percent]");
      if (pct) pct.textContent = data.status === "processing" ? data.percentage + "%" : "";
      // Create's feed shows the drawing as it goes, then the result.
      var box = row.querySelector("[data-thumb-box]");
      var src = data.status === "finished" && (data.image_url || data.original_image_url)
        ? "/tasks/" + data.task_id + "/image/0?w=96"
        : data.preview_image_url;
      if (box && src) {
        var img = box.querySelector("img");
        if (!img) {
          img = document.createElement("img");
          img.alt = "";
          img.width = img.height = 96;
          box.appendChild(img);
        }
        if (img.getAttribute("src") !== src) img.src = src;
      }
      if (FINAL[data.status]) {
        row.removeAttribute("data-running");
        if (!list.querySelector("[data-running]")) {
          es.close();
          list.easelStream = null;
        }
      }
    }
    es.addEventListener("progress", function (e) {
      update(JSON.parse(e.data));
    });
    es.addEventListener("task", function (e) {
      update(JSON.parse(e.data));
    });
  }

  function scan(root) {
    if (!root || !root.querySelectorAll) return;
    if (root.matches && root.matches("[data-live]")) follow(root);
    root.querySelectorAll("[data-live]").forEach(follow);
    root.querySelectorAll("[data-live-list]").forEach(followList);
  }
  document.addEventListener("DOMContentLoaded", function () {
    scan(document);
  });
  // The playground's answer arrives by htmx: follow the task it shows. A row Create put at
  // the top of its feed (out of band) is followed by the feed's stream, opened if it was not.
  document.addEventListener("htmx:load", function (e) {
    scan(e.detail && e.detail.elt);
  });
  document.addEventListener("htmx:afterSettle", function () {
    document.querySelectorAll("[data-live-list]").forEach(followList);
  });
  // A section htmx takes off the page (the playground submitted again) closes its stream.
  document.addEventListener("htmx:beforeCleanupElement", function (e) {
    var el = e.detail && e.detail.elt;
    if (el && el.easelStream) el.easelStream.close();
  });
})();
