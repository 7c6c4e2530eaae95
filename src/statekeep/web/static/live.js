// statekeep viewer: live updates (Server-Sent Events) and relative times.
// No framework, no build. The pages are complete without this script; it only adds.
// Every fragment inserted comes rendered and escaped by the server.
"use strict";

(function () {
  var body = document.body;

  function fragment(html) {
    var t = document.createElement("template");
    t.innerHTML = html.trim();
    return t.content.firstElementChild;
  }

  function relative(iso) {
    var when = Date.parse(iso);
    if (isNaN(when)) return null;
    var s = (Date.now() - when) / 1000, ahead = s < 0;
    s = Math.abs(s);
    if (s < 10) return "just now";
    var units = [[86400, "d"], [3600, "h"], [60, "min"], [1, "s"]];
    for (var i = 0; i < units.length; i++) {
      if (s >= units[i][0]) {
        var text = Math.floor(s / units[i][0]) + " " + units[i][1];
        return ahead ? "in " + text : text + " ago";
      }
    }
    return "just now";
  }

  function refreshTimes() {
    var times = document.querySelectorAll("time.ago");  // the title keeps the exact time
    for (var i = 0; i < times.length; i++) {
      var text = relative(times[i].getAttribute("datetime"));
      if (text !== null) times[i].textContent = text;
    }
  }

  function listen(url, handlers) {
    var source = new EventSource(url);
    source.onopen = function () { body.setAttribute("data-live", "on"); };
    source.onerror = function () {
      // The browser reconnects by itself (with Last-Event-ID) unless the stream is closed.
      body.setAttribute("data-live", source.readyState === EventSource.CLOSED ? "off" : "reconnecting");
    };
    Object.keys(handlers).forEach(function (name) {
      source.addEventListener(name, function (ev) { handlers[name](JSON.parse(ev.data), source); });
    });
    return source;
  }

  setInterval(refreshTimes, 15000);

  function runsPage() {
    var feed = body.getAttribute("data-feed");
    if (!feed) return;
    var tbody = document.querySelector("#runs tbody");
    listen(feed, {
      row: function (data) {
        var row = fragment(data.html);
        if (!row) return;
        var old = tbody.querySelector('tr.run[data-id="' + CSS.escape(data.id) + '"]');
        if (old) old.remove();
        tbody.insertBefore(row, tbody.firstElementChild);
        var empty = document.getElementById("empty");
        if (empty) empty.remove();
      },
      remove: function (data) {
        // A run updated so that it no longer matches the page's filters.
        var old = tbody.querySelector('tr.run[data-id="' + CSS.escape(data.id) + '"]');
        if (old) old.remove();
      }
    });
  }

  function runPage() {
    var events = body.getAttribute("data-events");
    if (!events) return;
    var timeline = document.getElementById("timeline");
    var last = parseInt(body.getAttribute("data-last-seq") || "-1", 10);
    listen(events + "?after=" + last, {
      entry: function (data) {
        if (timeline.querySelector('li.entry[data-seq="' + data.seq + '"]')) return;
        var li = fragment(data.html);
        if (li) timeline.appendChild(li);
      },
      summary: function (data) {
        var status = document.getElementById("status");
        status.textContent = data.status;
        status.className = data.status_class;
        document.getElementById("turn").textContent = data.turn;
        document.getElementById("tokens").textContent = data.tokens;
      },
      end: function (data, source) {
        source.close();
        body.setAttribute("data-live", "off");
        if (data.reason === "approval") {
          // Stopped for a person's approval: the page again, with the calls that wait.
          window.location.reload();
          return;
        }
        if (data.reason === "deleted") {
          // Gone from the store while open: say so, rather than look as it was.
          var status = document.getElementById("status");
          status.textContent = "deleted";
          status.className = "status-deleted";
        }
      }
    });
  }

  if (body.getAttribute("data-page") === "runs") runsPage();
  else if (body.getAttribute("data-page") === "run") runPage();
})();
