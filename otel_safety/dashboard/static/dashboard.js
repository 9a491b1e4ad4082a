// Said on the page, not only in the browser's console: htmx drops a 4xx or 5xx answer and
// a request that never reached the dashboard, so a reviewer's Approve would do nothing
// visible and the panels would stop refreshing in silence.
(function () {
  "use strict";

  function banner() {
    return document.getElementById("problem");
  }

  function say(text) {
    var shown = banner();
    if (shown) {
      shown.textContent = text;
      shown.hidden = false;
    }
  }

  document.addEventListener("htmx:responseError", function (event) {
    var xhr = event.detail.xhr;
    if (xhr.status === 401) {
      say("Not signed in any more (the dashboard restarted, or the session is older than 12 hours): " +
          "nothing was changed. Open the dashboard's address with ?token=<token> again.");
      return;
    }
    say("The dashboard answered " + xhr.status + ", so nothing was changed: " +
        (xhr.responseText || xhr.statusText || "").slice(0, 300));
  });

  document.addEventListener("htmx:sendError", function () {
    say("The dashboard cannot be reached (stopped, or the network is down): nothing was " +
        "changed, and what this page shows is no longer refreshed.");
  });

  document.addEventListener("htmx:afterRequest", function (event) {
    var shown = banner();
    if (shown && event.detail.successful) {
      shown.hidden = true;
    }
  });

  // The "acting as" name is kept for this tab across its pages, so a trace opened from the
  // flagged list records the reviewer who typed it, not the dashboard's default.
  document.addEventListener("DOMContentLoaded", function () {
    var actor = document.getElementById("actor");
    if (!actor) {
      return;
    }
    var kept = window.sessionStorage.getItem("otel-safety-actor");
    if (kept) {
      actor.value = kept;
    }
    actor.addEventListener("input", function () {
      window.sessionStorage.setItem("otel-safety-actor", actor.value);
    });
  });
})();
