const $ = (id) => document.getElementById(id);
const ORDER = ["todo", "doing", "done"];

function showError(text) {
  $("error").textContent = text;
  $("error").hidden = !text;
}

async function call(method, path, body) {
  const resp = await fetch(path, {method, headers: {"Content-Type": "application/json"},
                                  body: body === undefined ? undefined : JSON.stringify(body)});
  const data = resp.status === 204 ? null : await resp.json();
  if (!resp.ok) {
    showError(data.error || "Refused.");
    return null;
  }
  showError("");
  return data;
}

function render(board) {
  $("board").replaceChildren(...board.columns.map((col, i) => {
    const box = document.createElement("div");
    box.className = "column";
    box.dataset.name = col.name;
    const head = document.createElement("h2");
    head.textContent = col.name + " ";
    const count = document.createElement("span");
    count.className = "count";
    count.textContent = col.limit === null ? `${col.cards.length}` : `${col.cards.length}/${col.limit}`;
    head.append(count);
    const cards = document.createElement("div");
    cards.className = "cards";
    for (const card of col.cards) {
      const el = document.createElement("div");
      el.className = "card";
      const title = document.createElement("span");
      title.className = "title";
      title.textContent = card.title;
      el.append(title);
      for (const [cls, step, label] of [["left", -1, "◀"], ["right", 1, "▶"]]) {
        const target = ORDER[i + step];
        if (!target) continue;
        const b = document.createElement("button");
        b.className = cls;
        b.type = "button";
        b.textContent = label;
        b.addEventListener("click", async () => {
          await call("POST", `/api/cards/${card.id}/move`, {column: target});
          refresh();
        });
        el.append(" ", b);
      }
      cards.append(el);
    }
    box.append(head, cards);
    return box;
  }));
}

let shown = 0;
async function refresh() {
  const mine = ++shown;
  const board = await (await fetch("/api/board")).json();
  if (mine === shown) render(board);  // else a newer refresh started: its data is newer
}

$("add-card").addEventListener("click", async () => {
  const title = $("new-card").value.trim();
  if (!title) return showError("A card needs a title.");
  if (await call("POST", "/api/cards", {title})) $("new-card").value = "";
  refresh();
});

refresh();
