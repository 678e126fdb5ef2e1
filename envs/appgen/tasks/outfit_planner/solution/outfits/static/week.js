(() => {
  const $ = (id) => document.getElementById(id);
  const KINDS = ["top", "bottom", "outer", "shoes"];

  async function loadSettings() {
    const resp = await fetch("/api/settings");
    if (!resp.ok) return;
    const settings = await resp.json();
    if (settings.city) {
      if (!$("home-city").value) $("home-city").value = settings.city;
      if (!$("city").value) $("city").value = settings.city;
    }
  }

  $("save-city").addEventListener("click", async () => {
    await fetch("/api/settings", {
      method: "PUT", headers: {"Content-Type": "application/json"},
      body: JSON.stringify({city: $("home-city").value.trim()}),
    });
  });

  $("plan-week").addEventListener("click", async () => {
    $("error").hidden = true;  // the last action's error goes with a new one
    const city = encodeURIComponent($("city").value.trim());
    const resp = await fetch(`/api/week?days=5${city ? "&city=" + city : ""}`);
    const body = await resp.json();
    if (!resp.ok) {
      $("error").textContent = body.error || "Could not plan the week.";
      $("error").hidden = false;
      return;
    }
    $("week").replaceChildren(...body.days.map((d) => {
      const box = document.createElement("div");
      box.className = "day";
      for (const [cls, text] of [["date", d.date], ["temp", d.display],
          ["outfit", KINDS.filter((k) => d.outfit[k]).map((k) => d.outfit[k].name).join(", ")]]) {
        const el = document.createElement("div");
        el.className = cls;
        el.textContent = text;
        box.append(el);
      }
      return box;
    }));
  });

  loadSettings();
})();
