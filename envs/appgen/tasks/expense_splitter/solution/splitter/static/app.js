const $ = (id) => document.getElementById(id);

function showError(text) {
  $("error").textContent = text;
  $("error").hidden = !text;
}

async function post(path, body) {
  const resp = await fetch(path, {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)});
  const data = await resp.json();
  showError(resp.ok ? "" : (data.error || "Refused."));
  return resp.ok;
}

let shown = 0;
async function refresh() {
  const mine = ++shown;
  const [members, balances] = await Promise.all(
    ["/api/members", "/api/balances"].map(async (path) => (await fetch(path)).json()));
  if (mine !== shown) return;  // a newer refresh started: its data is newer
  const chosen = $("payer").value;
  $("payer").replaceChildren(...members.map((m) => new Option(m.name, m.name)));
  if (chosen) $("payer").value = chosen;
  $("balances").replaceChildren(...balances.map((b) => {
    const li = document.createElement("li");
    li.textContent = `${b.name}: ${b.display}`;
    return li;
  }));
}

$("add-member").addEventListener("click", async () => {
  if (await post("/api/members", {name: $("member-name").value.trim()})) $("member-name").value = "";
  refresh();
});

$("expense-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const body = {payer: $("payer").value, amount: Number($("amount").value), description: $("description").value};
  if (await post("/api/expenses", body)) {
    $("amount").value = "";
    $("description").value = "";
  }
  refresh();
});

refresh();
