// odf-node web UI: live heads (server-sent events), in-place swaps, list search.
// Served by the node itself; loads nothing from elsewhere and never writes.
"use strict";
(function () {
  const badge = document.getElementById("live");
  const latest = {};

  // Replace `selector` with the same element of `url`'s page (no full reload). Only the
  // newest swap of a selector lands: an older answer arriving late is dropped.
  async function swap(url, selector, mode) {
    const ticket = (latest[selector] = (latest[selector] || 0) + 1);
    const resp = await fetch(url, { headers: { Accept: "text/html" }, credentials: "same-origin" });
    const doc = new DOMParser().parseFromString(await resp.text(), "text/html");
    if (ticket !== latest[selector]) {
      return;
    }
    const fresh = doc.querySelector(selector);
    const old = document.querySelector(selector);
    if (fresh && old) {
      old.replaceWith(document.importNode(fresh, true));
    }
    if (mode === "push") {
      history.pushState({ swap: selector }, "", url);
    } else if (mode === "replace") {
      history.replaceState({ swap: selector }, "", url);
    }
  }

  document.addEventListener("click", function (ev) {
    const link = ev.target.closest("a[data-swap]");
    if (!link || ev.ctrlKey || ev.metaKey || ev.shiftKey || ev.button !== 0) {
      return;
    }
    ev.preventDefault();
    swap(link.href, link.dataset.swap, "push");
  });

  function formUrl(form) {
    const url = new URL(form.getAttribute("action"), location.href);
    url.search = new URLSearchParams(new FormData(form)).toString();
    return url.toString();
  }

  // A write: the token typed into the form goes as the bearer token, never elsewhere.
  async function write(form, method) {
    const result = form.querySelector("#write-result");
    const body = JSON.stringify({ dataset: form.elements.dataset.value });
    const resp = await fetch(form.getAttribute("action"), {
      method: method,
      credentials: "same-origin",
      headers: {
        "Content-Type": "application/json",
        Authorization: "Bearer " + form.elements.token.value,
      },
      body: body,
    });
    const doc = await resp.json().catch(() => ({}));
    if (resp.ok && doc.removed === false) {
      result.textContent = "was not followed";
    } else {
      result.textContent = resp.ok ? "done" : doc.error || "refused (" + resp.status + ")";
    }
    result.className = resp.ok ? "ok" : "error";
    if (resp.ok) {
      swap(location.href, "#follows", "none");
    }
  }

  document.addEventListener("submit", function (ev) {
    const writing = ev.target.closest("form.write");
    if (writing) {
      ev.preventDefault();
      write(writing, (ev.submitter && ev.submitter.value) || "POST");
      return;
    }
    const form = ev.target.closest("form[data-swap]");
    if (!form) {
      return;
    }
    ev.preventDefault();
    swap(formUrl(form), form.dataset.swap, "push");
  });

  window.addEventListener("popstate", function () {
    swap(location.href, "#main", "none");
  });

  // The dataset list is filtered by the server: typing swaps the list (debounced).
  const search = document.getElementById("search");
  if (search) {
    let timer = null;
    search.addEventListener("input", function () {
      clearTimeout(timer);
      timer = setTimeout(function () {
        swap(formUrl(search.form), "#list", "replace");
      }, 120);
    });
  }

  // A new head: the list updates (or gains) that row; a dataset page re-reads itself.
  function onListHead(msg, list) {
    const holder = document.createElement("tbody");
    holder.innerHTML = msg.row;
    const row = holder.firstElementChild;
    row.classList.add("fresh");
    const rows = list.querySelector("#datasets").tBodies[0];
    const old = rows.querySelector('tr[data-id="' + CSS.escape(msg.id) + '"]');
    if (old) {
      old.replaceWith(row);
      return;
    }
    const needle = search ? search.value.trim().toLowerCase() : "";
    // A new dataset joins a list that shows everything matching the search.
    if (list.dataset.complete === "1" && msg.alias.toLowerCase().includes(needle)) {
      const next = Array.from(rows.rows).find((r) => r.dataset.alias > msg.alias);
      rows.insertBefore(row, next || null);
      const count = document.getElementById("count");
      count.textContent = String(Number(count.textContent) + 1);
    }
  }

  function onHead(msg) {
    const list = document.getElementById("list");
    if (list) {
      onListHead(msg, list);
      return;
    }
    const title = document.querySelector("h1[data-id]");
    if (title && title.dataset.id === msg.id) {
      swap(location.href, "#main", "none");
    }
  }

  if (document.body.dataset.live === "1" && window.EventSource) {
    const source = new EventSource("/ui/events");
    source.onopen = function () {
      badge.textContent = "live";
      badge.classList.add("on");
    };
    source.onerror = function () {
      badge.textContent = "reconnecting";
      badge.classList.remove("on");
    };
    source.addEventListener("head", function (ev) {
      onHead(JSON.parse(ev.data));
    });
  } else if (badge) {
    badge.hidden = true;
  }
})();
