"""Every recipe in the suite, found by looking: each package ``workloads/<name>/`` whose
``__init__.py`` defines ``RECIPE`` (a :class:`~workloads.contract.Recipe`), in ``Recipe.order``,
with its facts beside it in ``workloads/<name>/profile.yaml`` (sizes per preset, ncu's kernel
filter and launch counts, cold/warm steps, ...). Adding a workload = one folder; nothing here changes."""
from __future__ import annotations

import copy
import importlib
import pkgutil
import re
from functools import lru_cache
from pathlib import Path

import yaml

import workloads
from workloads.contract import Recipe, RecipeFactsError

#: a recipe's facts file, beside its ``__init__.py``
FACTS_FILE = "profile.yaml"
#: the presets a facts file may hold; each is laid over ``default`` key by key
PRESETS = ("default", "lab", "laptop", "smoke")
FACTS_SCHEMA = Path(workloads.__file__).parent / "recipe_facts.schema.yaml"
#: libyaml's loader where PyYAML was built with it (compiled, much quicker), else the pure-Python one:
#: the same safe subset of YAML, the same values
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str):
    """``yaml.safe_load(text)``, through libyaml where it is there."""
    return yaml.load(text, Loader=_YAML_LOADER)  # noqa: S506 - a safe loader


@lru_cache(maxsize=None)
def _recipe_packages() -> tuple:
    """The recipe packages under workloads/, imported (their ``__init__`` imports no GPU package)."""
    found = []
    for info in pkgutil.iter_modules(workloads.__path__):
        if info.ispkg:
            module = importlib.import_module(f"workloads.{info.name}")
            if isinstance(getattr(module, "RECIPE", None), Recipe):
                found.append(module)
    return tuple(found)


def declared_frameworks() -> list:
    """(Framework record, file) for each recipe package that declares ``FRAMEWORK``."""
    return [(m.FRAMEWORK, m.__file__) for m in _recipe_packages() if getattr(m, "FRAMEWORK", None) is not None]


def _recipes() -> tuple[Recipe, ...]:
    recipes = sorted((m.RECIPE for m in _recipe_packages()), key=lambda r: (r.order, r.name))
    names = [r.name for r in recipes]
    for m in _recipe_packages():
        if m.RECIPE.name != m.__name__.rsplit(".", 1)[1]:
            raise ValueError(f"{m.__file__}: RECIPE.name is {m.RECIPE.name!r}, not its folder's name")
    if len(set(names)) != len(names):
        raise ValueError(f"two recipes share a name: {names}")
    return tuple(recipes)


#: every recipe, in report order
RECIPES: tuple[Recipe, ...] = _recipes()
BY_NAME = {r.name: r for r in RECIPES}


def facts_path(name: str) -> Path:
    """``workloads/<name>/profile.yaml`` of a recipe."""
    module = next((m for m in _recipe_packages() if m.RECIPE.name == name), None)
    if module is None:
        raise RecipeFactsError(f"workloads/{name}", f"no recipe {name!r} (have: {', '.join(BY_NAME)})")
    return Path(module.__file__).parent / FACTS_FILE


@lru_cache(maxsize=None)
def _facts_file(name: str) -> dict:
    """The presets of a recipe's facts file, as written: a recipe without one is an error, never a
    recipe the pipeline silently leaves out."""
    path = facts_path(name)
    if not path.is_file():
        raise RecipeFactsError(path, f"missing: every recipe states its facts there (presets {', '.join(PRESETS)}; "
                                     f"keys in {FACTS_SCHEMA.name})")
    try:
        presets = load_yaml(path.read_text())
    except yaml.YAMLError as e:
        raise RecipeFactsError(path, f"not YAML ({e})") from None
    if not isinstance(presets, dict) or not isinstance(presets.get("default"), dict):
        raise RecipeFactsError(path, "needs a mapping with a `default` preset")
    unknown = sorted(set(presets) - set(PRESETS))
    if unknown:
        raise RecipeFactsError(path, f"unknown presets {unknown} (have: {', '.join(PRESETS)})")
    return presets


def laid_over(base: dict, over: dict | None) -> dict:
    """``over`` laid over ``base`` key by key, mappings merged and everything else replaced, as
    Snakemake merges config files (``snakemake.utils.update_config``); neither is changed."""
    merged = copy.deepcopy(base)
    for key, value in (over or {}).items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = laid_over(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def recipe_facts(name: str, preset: str = "default", overrides: dict | None = None) -> dict:
    """A recipe's facts under ``preset`` (its ``default`` with the preset laid over it, then
    ``overrides``: the config's ``workloads.<name>``), checked against the schema and the recipe's
    variants."""
    if preset not in PRESETS:
        raise RecipeFactsError(facts_path(name), f"no preset {preset!r} (have: {', '.join(PRESETS)})")
    presets = _facts_file(name)
    facts = laid_over(laid_over(presets["default"], presets.get(preset)), overrides)
    where = f"{facts_path(name)} (preset {preset}{', with the config overrides' if overrides else ''})"
    check_facts(BY_NAME[name], facts, where)
    return facts


@lru_cache(maxsize=1)
def _schema() -> dict:
    return load_yaml(FACTS_SCHEMA.read_text())


@lru_cache(maxsize=1)
def _validator():
    """The facts schema's validator, the schema itself checked once: ``jsonschema.validate`` checks it
    again on every call, most of a recipe's check."""
    import jsonschema  # noqa: PLC0415 - a Snakemake dependency, needed only where facts are read

    schema = _schema()
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def check_facts(recipe: Recipe, facts: dict, where: str) -> None:
    """Raise :class:`RecipeFactsError` naming ``where`` and the key unless ``facts`` fit the schema
    and name only the recipe's variants, and every step they name runs at a size they keep."""
    import jsonschema  # noqa: PLC0415 - a Snakemake dependency, needed only where facts are read

    name = recipe.name
    # the error jsonschema.validate would raise: the best match among them
    e = jsonschema.exceptions.best_match(_validator().iter_errors(facts))
    if e is not None:
        key = ".".join(str(p) for p in e.absolute_path)
        raise RecipeFactsError(where, f"workloads.{name}{'.' + key if key else ''}: {e.message}")
    ncu = facts["ncu"]
    if ncu.get("kernel_regex"):
        try:
            re.compile(ncu["kernel_regex"])
        except re.error as e:
            raise RecipeFactsError(where, f"workloads.{name}.ncu.kernel_regex {ncu['kernel_regex']!r}: "
                                          f"not a regular expression ({e})") from None
    named = {"ncu.variants": ncu.get("variants", []), "ncu.full_variants": ncu.get("full_variants", []),
             "variant_sizes": facts.get("variant_sizes", {}),
             "coldwarm_variants": facts.get("coldwarm_variants") or [],
             "timed_first": facts.get("timed_first") or [],
             "l2_modes.variants": (facts.get("l2_modes") or {}).get("variants", [])}
    for key, variants in named.items():
        for v in variants:
            if v not in recipe.variants:
                raise RecipeFactsError(where, f"workloads.{name}.{key}: no variant {v!r} "
                                              f"(have: {', '.join(recipe.variants)})")
    # presets and overrides merge key by key: one that changes the sizes keeps the default's
    # variant_sizes, and a step whose sizes are all gone would silently leave the run
    for v, sizes in (facts.get("variant_sizes") or {}).items():
        if not set(sizes) & set(facts["sizes"]):
            raise RecipeFactsError(where, f"workloads.{name}.variant_sizes.{v}: {sizes} names none of the sizes "
                                          f"{facts['sizes']}, so {v!r} would not run; set its variant_sizes where "
                                          "the sizes are set")
    for v in ncu.get("variants", []):
        runs_at = (facts.get("variant_sizes") or {}).get(v, facts["sizes"])
        if not set(runs_at) & set(facts["sizes"]) & set(ncu["sizes"]):
            raise RecipeFactsError(where, f"workloads.{name}.ncu.variants: {v!r} runs at none of ncu.sizes "
                                          f"{ncu['sizes']}, so ncu would not profile it")


def facts_for_run(preset: str, overrides: dict | None = None) -> dict:
    """Every recipe's facts for one run, in report order: ``overrides`` is the config's
    ``workloads`` mapping (one-off changes), which may name only known recipes."""
    unknown = sorted(set(overrides or {}) - set(BY_NAME))
    if unknown:
        raise RecipeFactsError("config: workloads", f"no such workload {unknown} (have: {', '.join(BY_NAME)})")
    return {r.name: recipe_facts(r.name, preset, (overrides or {}).get(r.name)) for r in RECIPES}
