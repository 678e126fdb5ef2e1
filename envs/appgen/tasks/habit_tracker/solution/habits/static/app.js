const $ = (id) => document.getElementById(id);

function today() {
  const d = new Date();
  const pad = (n) => String(n).padStart(2, "0");
  return `${pad(d.getDate())}/${pad(d.getMonth() + 1)}/${d.getFullYear()}`;
}

let shown = 0;
async function refresh() {
  const mine = ++shown;
  const habits = await (await fetch("/api/habits?today=" + encodeURIComponent(today()))).json();
  if (mine !== shown) return;  // a newer refresh started: its data is newer
  $("habits").replaceChildren(...habits.map((h) => {
    const li = document.createElement("li");
    li.className = "habit";
    li.dataset.id = h.id;
    const name = document.createElement("span");
    name.className = "name";
    name.textContent = h.name;
    const streak = document.createElement("span");
    streak.className = "streak";
    streak.textContent = String(h.streak);
    const check = document.createElement("button");
    check.className = "check-in";
    check.type = "button";
    check.textContent = "Done today";
    check.addEventListener("click", async () => {
      await fetch(`/api/habits/${h.id}/checkins`, {
        method: "POST", headers: {"Content-Type": "application/json"},
        body: JSON.stringify({date: today()}),
      });
      refresh();
    });
    li.append(name, " ", streak, " ", check);
    document.dispatchEvent(new CustomEvent("habit-rendered", {detail: {li, habit: h}}));
    return li;
  }));
}

$("habit-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const resp = await fetch("/api/habits", {
    method: "POST", headers: {"Content-Type": "application/json"},
    body: JSON.stringify({name: $("habit-name").value.trim()}),
  });
  const body = await resp.json();
  $("error").hidden = resp.ok;
  $("error").textContent = resp.ok ? "" : (body.error || "Could not add.");
  if (resp.ok) $("habit-name").value = "";
  refresh();
});

refresh();
