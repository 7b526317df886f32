// odf-node web UI: live heads (server-sent events), in-place swaps, list search.
// Served by the node itself; loads nothing from elsewhere and never writes.
"use strict";
(function () {
  const body = document.body;
  const badge = document.getElementById("live");

  // Replace `selector` with the same element of `url`'s page (no full reload).
  async function swap(url, selector, push) {
    const resp = await fetch(url, { headers: { Accept: "text/html" }, credentials: "same-origin" });
    const doc = new DOMParser().parseFromString(await resp.text(), "text/html");
    const fresh = doc.querySelector(selector);
    const old = document.querySelector(selector);
    if (fresh && old) {
      old.replaceWith(document.importNode(fresh, true));
    }
    if (push) {
      history.pushState({ swap: selector }, "", url);
    }
    filter();
  }

  document.addEventListener("click", function (ev) {
    const link = ev.target.closest("a[data-swap]");
    if (!link || ev.ctrlKey || ev.metaKey || ev.shiftKey || ev.button !== 0) {
      return;
    }
    ev.preventDefault();
    swap(link.href, link.dataset.swap, true);
  });

  document.addEventListener("submit", function (ev) {
    const form = ev.target.closest("form[data-swap]");
    if (!form) {
      return;
    }
    ev.preventDefault();
    const url = new URL(form.getAttribute("action"), location.href);
    url.search = new URLSearchParams(new FormData(form)).toString();
    swap(url.toString(), form.dataset.swap, true);
  });

  window.addEventListener("popstate", function () {
    swap(location.href, "#main", false);
  });

  // The dataset list: rows whose alias does not contain the search text are hidden.
  const search = document.getElementById("search");
  function filter() {
    const table = document.getElementById("datasets");
    if (!table || !search) {
      return;
    }
    const needle = search.value.trim().toLowerCase();
    let shown = 0;
    for (const row of table.tBodies[0].rows) {
      const hit = row.dataset.alias.includes(needle);
      row.hidden = !hit;
      shown += hit ? 1 : 0;
    }
    const count = document.getElementById("count");
    if (count) {
      count.textContent = String(shown);
    }
  }
  if (search) {
    search.addEventListener("input", filter);
    search.form.addEventListener("submit", function (ev) {
      ev.preventDefault();
      filter();
    });
  }

  // A new head: the list updates (or gains) that row; a dataset page re-reads itself.
  function onHead(msg) {
    const table = document.getElementById("datasets");
    if (table) {
      const holder = document.createElement("tbody");
      holder.innerHTML = msg.row;
      const row = holder.firstElementChild;
      row.classList.add("fresh");
      const rows = table.tBodies[0];
      const old = rows.querySelector('tr[data-id="' + CSS.escape(msg.id) + '"]');
      if (old) {
        old.replaceWith(row);
      } else {
        const next = Array.from(rows.rows).find((r) => r.dataset.alias > row.dataset.alias);
        rows.insertBefore(row, next || null);
      }
      filter();
      return;
    }
    const title = document.querySelector("h1[data-id]");
    if (title && title.dataset.id === msg.id) {
      swap(location.href, "#main", false);
    }
  }

  if (body.dataset.live === "1" && window.EventSource) {
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
