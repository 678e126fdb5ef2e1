document.addEventListener("habit-rendered", (event) => {
  const {li, habit} = event.detail;
  const button = document.createElement("button");
  button.className = "show-week";
  button.type = "button";
  button.textContent = "Week";
  button.addEventListener("click", async () => {
    const week = await (await fetch(`/api/habits/${habit.id}/week?date=` + encodeURIComponent(today()))).json();
    document.getElementById("week").replaceChildren(...week.days.map((d) => {
      const day = document.createElement("div");
      day.className = "day" + (d.done ? " done" : "");
      const date = document.createElement("span");
      date.className = "date";
      date.textContent = d.date;
      day.append(date);
      return day;
    }));
    document.getElementById("week-count").textContent = `${week.count}/7`;
  });
  li.append(" ", button);
});
