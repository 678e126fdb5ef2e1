const $ = (id) => document.getElementById(id);

function showError(text) {
  $("error").textContent = text;
  $("error").hidden = !text;
}

let shown = 0;
async function refresh() {
  const mine = ++shown;
  const board = await (await fetch("/api/board")).json();
  if (mine !== shown) return;  // a newer refresh started: its data is newer
  $("unit").value = board.unit;
  $("board").replaceChildren(...board.cities.map((c) => {
    const card = document.createElement("div");
    card.className = "card";
    const temp = c.temp === null ? "–" : `${c.temp.toFixed(1)} °${board.unit}`;
    for (const [cls, text] of [["name", c.name], ["temp", temp], ["condition", c.condition]]) {
      const el = document.createElement("div");
      el.className = cls;
      el.textContent = text;
      card.append(el);
    }
    const remove = document.createElement("button");
    remove.className = "remove";
    remove.type = "button";
    remove.textContent = "Remove";
    remove.addEventListener("click", async () => {
      await fetch("/api/cities/" + encodeURIComponent(c.name), {method: "DELETE"});
      refresh();
    });
    card.append(remove);
    return card;
  }));
}

$("add-city").addEventListener("click", async () => {
  const resp = await fetch("/api/cities", {
    method: "POST", headers: {"Content-Type": "application/json"},
    body: JSON.stringify({name: $("city").value.trim()}),
  });
  const body = await resp.json();
  if (!resp.ok) return showError(body.error || "Could not add the city.");
  showError("");
  $("city").value = "";
  refresh();
});

$("unit").addEventListener("change", async () => {
  await fetch("/api/settings", {
    method: "PUT", headers: {"Content-Type": "application/json"},
    body: JSON.stringify({unit: $("unit").value}),
  });
  refresh();
});

refresh();
