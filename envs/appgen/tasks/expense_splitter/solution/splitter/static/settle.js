document.getElementById("settle").addEventListener("click", async () => {
  const plan = await (await fetch("/api/settlements")).json();
  document.getElementById("settlements").replaceChildren(...plan.map((s) => {
    const li = document.createElement("li");
    li.textContent = `${s.from} pays ${s.to} ${s.display}`;
    return li;
  }));
});
