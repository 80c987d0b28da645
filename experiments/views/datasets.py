"""Dashboard pages of training datasets: the list (filtered by endpoint in place with htmx)
and one dataset version (lineage, statistics, schema, the versions trained on it)."""

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import render
from django.views.decorators.vary import vary_on_headers

from experiments.selectors import datasets as selectors


@login_required
@vary_on_headers("HX-Request")
def dataset_list(request):
    endpoint = request.GET.get("endpoint", "").strip()[:64]
    datasets = selectors.dataset_list(user=request.user, endpoint=endpoint or None)
    page = Paginator(datasets, 50).get_page(request.GET.get("page"))
    page.object_list = list(page.object_list)
    trained = selectors.dataset_versions_by_dataset(user=request.user, datasets=page.object_list)
    for dataset in page.object_list:
        dataset.trained_versions = trained[dataset.public_id]
    context = {
        "page": page,
        "endpoint": endpoint,
        "endpoints": sorted(set(selectors.dataset_list(user=request.user).values_list("endpoint__name", flat=True))),
    }
    if request.htmx:
        return render(request, "experiments/datasets/list.html#dataset-rows", context)
    return render(request, "experiments/datasets/list.html", context)


@login_required
def dataset_detail(request, dataset_id):
    dataset = selectors.dataset_get(user=request.user, dataset_id=dataset_id)
    stats = dataset.statistics or {}
    mix = [
        {"variant": name, "percent": round(share * 100, 1)}
        for name, share in sorted((stats.get("variant_mix") or {}).items(), key=lambda kv: -kv[1])
    ]
    context = {
        "dataset": dataset,
        "stats": stats,
        "label_pct": round(100 * float(stats.get("label_rate") or 0), 2),
        "mix": mix,
        "features": sorted((stats.get("feature_ranges") or {}).items()),
        "lineage": dataset.lineage or {},
        "versions": selectors.dataset_versions(user=request.user, dataset=dataset).select_related("model"),
        "others": selectors.dataset_list(user=request.user, name=dataset.name)
        .filter(team=dataset.team)
        .exclude(pk=dataset.pk)[:20],
    }
    return render(request, "experiments/datasets/detail.html", context)
