const $ = (id) => document.getElementById(id);

function line(c) {
  return `${Number(c.amount).toFixed(2)} ${c.from} = ${Number(c.result).toFixed(2)} ${c.to}`;
}

function showError(text) {
  $("error").textContent = text;
  $("error").hidden = !text;
}

async function loadCurrencies() {
  const resp = await fetch("/api/currencies");
  if (!resp.ok) return showError("The rates service is not answering.");
  const codes = await resp.json();
  for (const id of ["from", "to"]) {
    $(id).replaceChildren(...codes.map((c) => new Option(c, c)));
  }
}

let shown = 0;
async function loadHistory() {
  const mine = ++shown;
  const items = await (await fetch("/api/history")).json();
  if (mine !== shown) return;  // a newer load started: its data is newer
  $("history").replaceChildren(...items.map((c) => {
    const li = document.createElement("li");
    li.textContent = line(c);
    return li;
  }));
}

$("convert").addEventListener("click", async () => {
  const params = new URLSearchParams({amount: $("amount").value, from: $("from").value, to: $("to").value});
  const resp = await fetch("/api/convert?" + params);
  const body = await resp.json();
  if (!resp.ok) {
    $("result").textContent = "";
    return showError(body.error || "Could not convert.");
  }
  showError("");
  $("result").textContent = line(body);
  $("stale").hidden = !body.stale;
  loadHistory();
});

loadCurrencies();
loadHistory();
