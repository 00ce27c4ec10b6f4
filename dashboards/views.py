"""Pages. For now the overview of clusters and broker sets as the nameserver sees them."""

from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from nameserver import selectors
from nameserver.liveness import member


@login_required
def overview(request):
    groups = selectors.cluster_info()
    live = selectors.liveness_of(groups.values())
    clusters: dict[str, list] = {}
    for g in groups.values():
        rows = [
            {"member": m, "live": live.get(member(g.cluster_name, m.broker_addr))}
            for m in g.members
        ]
        clusters.setdefault(g.cluster_name, []).append({"group": g, "rows": rows})
    return render(request, "dashboards/overview.html", {"clusters": clusters})
