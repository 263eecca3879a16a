// Billing from the command line. Operators: price-book create | list | get
// | add-version, billing set-default | default | set-plan | verify, invoice
// finalize. Tenant admins (and operators with --tenant): billing plan |
// draft, invoice list | get | csv. Prices are given as JSON entries
// (--entries '[…]' or --entries @prices.json); money is printed in the
// currency's units.
#include <fstream>
#include <iterator>
#include <memory>

#include "cli/args.h"
#include "cli/commands.h"

namespace atrium::cli {

std::vector<Json> ItemsOf(const Json& value, const std::string& field) {
  const Json items = FieldAt(value, field);
  std::vector<Json> out;
  if (items.is_array()) out.assign(items.begin(), items.end());
  return out;
}

namespace {

const std::vector<Column> kBookColumns = {{"ID", "id"},
                                          {"NAME", "name"},
                                          {"CURRENCY", "currency"},
                                          {"DEFAULT", "default"},
                                          {"VERSION", "current_version"},
                                          {"LATEST", "latest_version"}};
const std::vector<Column> kEntryColumns = {{"METER", "meter"},
                                           {"MODEL", "model"},
                                           {"MIG", "mig_profile"},
                                           {"DEPLOYMENT", "deployment"},
                                           {"PRICE_MINOR", "price_minor"},
                                           {"TIERS", "tier_mode"},
                                           {"PER", "unit"}};
const std::vector<Column> kInvoiceColumns = {
    {"ID", "id"},       {"NUMBER", "number"},     {"PERIOD", "period"},
    {"TOTAL", "total"}, {"CURRENCY", "currency"}, {"FINAL", "finalized_at"}};

// --entries: JSON text, or @FILE holding it.
Result<Json> EntriesOf(const std::string& text) {
  std::string json = text;
  if (!text.empty() && text[0] == '@') {
    std::ifstream in(text.substr(1), std::ios::binary);
    if (!in) return Error::InvalidArgument("cannot read " + text.substr(1));
    json.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  auto parsed = ParseJson(json);
  if (!parsed.has_value()) {
    return Error::InvalidArgument("--entries is not JSON: " + parsed.error().message);
  }
  return parsed;
}

void PrintBook(Context& ctx, const Json& book) {
  if (ctx.json_output()) {
    ctx.PrintJson(book);
    return;
  }
  ctx.out() << "Price book " << EscapeForTerminal(StringAt(book, "name")) << " ("
            << EscapeForTerminal(StringAt(book, "id")) << "), "
            << EscapeForTerminal(StringAt(book, "currency"))
            << (FieldAt(book, "default") == Json(true) ? ", the default" : "") << "\n";
  for (const auto& v : ItemsOf(book, "versions")) {
    ctx.out() << "\nVersion " << CellText(FieldAt(v, "version")) << ", from "
              << CellText(FieldAt(v, "effective_from")) << ", minimum charge "
              << CellText(FieldAt(v, "minimum_charge")) << "\n";
    ctx.out() << FormatObjects(kEntryColumns, ItemsOf(v, "entries"));
  }
}

struct BookArgs {
  std::string name;  // or the book, for add-version / get
  std::string currency;
  std::string entries;
  std::string effective_from;
  int64_t minimum = -1;
  std::string note;
};

Result<Json> VersionBody(const BookArgs& args) {
  Json body = Json::object();
  ATRIUM_ASSIGN_OR_RETURN(body["entries"], EntriesOf(args.entries));
  if (!args.effective_from.empty()) body["effective_from"] = args.effective_from;
  if (args.minimum >= 0) body["minimum_charge_minor"] = args.minimum;
  if (!args.note.empty()) body["note"] = args.note;
  return body;
}

int CreateBook(Context& ctx, const BookArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto body = VersionBody(args);
  if (!body.has_value()) return ctx.Fail(body.error());
  (*body)["name"] = args.name;
  (*body)["currency"] = args.currency;
  auto book = api->Post("/api/v1/price-books", *body);
  if (!book.has_value()) return ctx.Fail(book.error());
  PrintBook(ctx, *book);
  return kExitOk;
}

int AddVersion(Context& ctx, const BookArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto body = VersionBody(args);
  if (!body.has_value()) return ctx.Fail(body.error());
  auto v = api->Post("/api/v1/price-books/" + UrlEncode(args.name) + "/versions", *body);
  if (!v.has_value()) return ctx.Fail(v.error());
  if (ctx.json_output()) {
    ctx.PrintJson(*v);
  } else {
    ctx.out() << "Version " << CellText(FieldAt(*v, "version")) << " of "
              << EscapeForTerminal(args.name) << " takes effect "
              << CellText(FieldAt(*v, "effective_from")) << ".\n";
  }
  return kExitOk;
}

int GetBook(Context& ctx, const BookArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto book = api->Get("/api/v1/price-books/" + UrlEncode(args.name));
  if (!book.has_value()) return ctx.Fail(book.error());
  PrintBook(ctx, *book);
  return kExitOk;
}

int ListBooks(Context& ctx) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto list = api->Get("/api/v1/price-books");
  if (!list.has_value()) return ctx.Fail(list.error());
  if (ctx.json_output()) {
    ctx.PrintJson(*list);
    return kExitOk;
  }
  ctx.out() << FormatObjects(kBookColumns, ItemsOf(*list, "items"));
  return kExitOk;
}

struct PlanArgs {
  std::string tenant;
  std::string book;
  std::string effective_from;
  int64_t anchor_day = 0;
  int64_t discount_bp = -1;
  int64_t commitment = -1;
  std::string entries;
  std::string note;
  bool prepaid = false;
};

int SetDefault(Context& ctx, const PlanArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  Json body = {{"price_book", args.book}};
  if (!args.effective_from.empty()) body["effective_from"] = args.effective_from;
  auto set = api->Put("/api/v1/billing/default-price-book", body);
  if (!set.has_value()) return ctx.Fail(set.error());
  if (ctx.json_output()) {
    ctx.PrintJson(*set);
  } else {
    ctx.out() << "Tenants without a plan are billed on " << EscapeForTerminal(args.book) << " from "
              << CellText(FieldAt(*set, "effective_from")) << ".\n";
  }
  return kExitOk;
}

int ShowDefault(Context& ctx) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto d = api->Get("/api/v1/billing/default-price-book");
  if (!d.has_value()) return ctx.Fail(d.error());
  if (ctx.json_output()) {
    ctx.PrintJson(*d);
    return kExitOk;
  }
  const Json now = FieldAt(*d, "price_book");
  ctx.out() << "Default price book: "
            << (now.is_string() ? EscapeForTerminal(now.get<std::string>()) : "none") << "\n";
  ctx.out() << FormatObjects(
      {{"VERSION", "version"}, {"PRICE_BOOK", "price_book"}, {"FROM", "effective_from"}},
      ItemsOf(*d, "versions"));
  return kExitOk;
}

int SetPlan(Context& ctx, const PlanArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.TenantBase(args.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  Json body = {{"price_book", args.book}};
  if (!args.effective_from.empty()) body["effective_from"] = args.effective_from;
  if (args.anchor_day > 0) body["anchor_day"] = args.anchor_day;
  if (args.discount_bp >= 0) body["discount_bp"] = args.discount_bp;
  if (args.commitment >= 0) body["commitment_minor"] = args.commitment;
  if (args.prepaid) body["prepaid"] = true;
  if (!args.note.empty()) body["note"] = args.note;
  if (!args.entries.empty()) {
    auto entries = EntriesOf(args.entries);
    if (!entries.has_value()) return ctx.Fail(entries.error());
    body["entries"] = *entries;
  }
  auto plan = api->Put(*base + "/billing/plan", body);
  if (!plan.has_value()) return ctx.Fail(plan.error());
  ctx.PrintObject(*plan, {"version", "effective_from", "price_book", "currency", "anchor_day",
                          "discount_bp", "commitment", "prepaid"});
  return kExitOk;
}

int ShowPlan(Context& ctx, const PlanArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.TenantBase(args.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  auto plan = api->Get(*base + "/billing/plan");
  if (!plan.has_value()) return ctx.Fail(plan.error());
  if (ctx.json_output()) {
    ctx.PrintJson(*plan);
    return kExitOk;
  }
  const Json own = FieldAt(*plan, "in_force");
  const Json book = FieldAt(*plan, "price_book");
  if (own.is_object()) {
    ctx.out() << "Plan version " << CellText(FieldAt(own, "version")) << " since "
              << CellText(FieldAt(own, "effective_from")) << ": discount "
              << CellText(FieldAt(own, "discount_bp")) << " bp, committed spend "
              << CellText(FieldAt(own, "commitment")) << ", periods from day "
              << CellText(FieldAt(own, "anchor_day")) << "\n";
    const auto contract = ItemsOf(own, "entries");
    if (!contract.empty())
      ctx.out() << "Contract prices:\n" << FormatObjects(kEntryColumns, contract);
  } else {
    ctx.out() << "No plan of its own: billed on the default price book.\n";
  }
  if (book.is_object()) {
    ctx.out() << "Price book " << EscapeForTerminal(StringAt(book, "name")) << " ("
              << EscapeForTerminal(StringAt(book, "currency")) << "):\n"
              << FormatObjects(kEntryColumns, ItemsOf(FieldAt(book, "in_force"), "entries"));
  } else {
    ctx.out() << "No price book applies: usage is counted, not charged.\n";
  }
  return kExitOk;
}

void PrintInvoice(Context& ctx, const Json& inv) {
  if (ctx.json_output()) {
    ctx.PrintJson(inv);
    return;
  }
  const Json number = FieldAt(inv, "number");
  ctx.out() << (number.is_string() ? "Invoice " + EscapeForTerminal(number.get<std::string>())
                                   : std::string("Draft invoice"))
            << " for " << EscapeForTerminal(StringAt(inv, "period")) << " ("
            << CellText(FieldAt(inv, "period_start_date")) << " to "
            << CellText(FieldAt(inv, "period_end_date")) << "), "
            << EscapeForTerminal(StringAt(inv, "currency")) << "\n";
  ctx.out() << FormatObjects({{"KIND", "kind"},
                              {"DESCRIPTION", "description"},
                              {"QUANTITY", "quantity_text"},
                              {"UNIT", "unit"},
                              {"PRICE_MINOR", "price_minor"},
                              {"AMOUNT", "amount"}},
                             ItemsOf(inv, "lines"));
  ctx.out() << "Total: " << CellText(FieldAt(inv, "total")) << " "
            << EscapeForTerminal(StringAt(inv, "currency")) << "\n";
}

struct InvoiceArgs {
  std::string tenant;
  std::string id;
  std::string period;
  std::string output;
  std::string by;  // draft: project | key
};

int Draft(Context& ctx, const InvoiceArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.TenantBase(args.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  auto inv = api->Get(WithQuery(*base + "/invoices/draft", {{"period", args.period}}));
  if (!inv.has_value()) return ctx.Fail(inv.error());
  PrintInvoice(ctx, *inv);
  if (!ctx.json_output() && !args.by.empty()) {
    const std::string field = args.by == "project" ? "by_project" : "by_key";
    const std::string name = args.by == "project" ? "project" : "key_id";
    std::vector<std::vector<std::string>> rows;
    for (const auto& line : ItemsOf(*inv, "lines")) {
      for (const auto& s : ItemsOf(line, field)) {
        rows.push_back({CellText(FieldAt(line, "description")), CellText(FieldAt(s, name)),
                        CellText(FieldAt(s, "amount"))});
      }
    }
    ctx.out() << "\nSpend per " << args.by << ":\n"
              << FormatTable({"LINE", args.by == "project" ? "PROJECT" : "KEY", "AMOUNT"}, rows);
  }
  return kExitOk;
}

int ListInvoices(Context& ctx, const InvoiceArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.TenantBase(args.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  auto list = api->Get(*base + "/invoices");
  if (!list.has_value()) return ctx.Fail(list.error());
  if (ctx.json_output()) {
    ctx.PrintJson(*list);
    return kExitOk;
  }
  ctx.out() << FormatObjects(kInvoiceColumns, ItemsOf(*list, "items"));
  return kExitOk;
}

int GetInvoice(Context& ctx, const InvoiceArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.TenantBase(args.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  auto inv = api->Get(*base + "/invoices/" + UrlEncode(args.id));
  if (!inv.has_value()) return ctx.Fail(inv.error());
  PrintInvoice(ctx, *inv);
  return kExitOk;
}

int InvoiceCsv(Context& ctx, const InvoiceArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.TenantBase(args.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  auto csv = api->GetBytes(*base + "/invoices/" + UrlEncode(args.id) + "/csv");
  if (!csv.has_value()) return ctx.Fail(csv.error());
  if (args.output.empty()) {
    ctx.out() << *csv;
    return kExitOk;
  }
  std::ofstream out(args.output, std::ios::binary | std::ios::trunc);
  out << *csv;
  if (!out.good()) return ctx.Fail(Error::InvalidArgument("cannot write " + args.output));
  return kExitOk;
}

int Finalize(Context& ctx, const InvoiceArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.TenantBase(args.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  auto inv = api->Post(*base + "/invoices/finalize", Json{{"period", args.period}});
  if (!inv.has_value()) return ctx.Fail(inv.error());
  PrintInvoice(ctx, *inv);
  return kExitOk;
}

int Verify(Context& ctx, const InvoiceArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  Json body = {{"period", args.period}};
  if (!args.tenant.empty()) body["tenant"] = args.tenant;
  auto report = api->Post("/api/v1/billing/verify", body);
  if (!report.has_value()) return ctx.Fail(report.error());
  const bool ok = FieldAt(*report, "ok") == Json(true);
  if (ctx.json_output()) {
    ctx.PrintJson(*report);
  } else {
    ctx.out() << FormatObjects({{"TENANT", "tenant_id"},
                                {"PERIOD", "period"},
                                {"RECORDS", "records"},
                                {"RATED_ROWS", "rated_rows"},
                                {"PENDING", "pending"},
                                {"INVOICE", "invoice_number"},
                                {"OK", "ok"}},
                               ItemsOf(*report, "tenants"));
    for (const auto& t : ItemsOf(*report, "tenants")) {
      for (const auto& p : ItemsOf(t, "problems")) {
        ctx.out() << EscapeForTerminal(StringAt(t, "tenant_id")) << ": "
                  << EscapeForTerminal(p.is_string() ? p.get<std::string>() : p.dump()) << "\n";
      }
    }
    ctx.out() << (ok ? "Every usage record was rated exactly once, and every final invoice sums "
                       "its rows.\n"
                     : "The books do not hold: see above.\n");
  }
  return ok ? kExitOk : kExitFailed;
}

struct CreditArgs {
  std::string tenant;
  int64_t amount_minor = 0;
  std::string kind;
  std::string expires_at;
  std::string note;
};

const std::vector<Column> kCreditColumns = {{"ID", "id"},
                                            {"KIND", "kind"},
                                            {"AMOUNT", "amount"},
                                            {"REMAINING", "remaining"},
                                            {"CURRENCY", "currency"},
                                            {"EXPIRES", "expires_at"},
                                            {"EXPIRED", "expired"},
                                            {"NOTE", "note"}};

int GrantCredit(Context& ctx, const CreditArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.TenantBase(args.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  Json body = {{"amount_minor", args.amount_minor}};
  if (!args.kind.empty()) body["kind"] = args.kind;
  if (!args.expires_at.empty()) body["expires_at"] = args.expires_at;
  if (!args.note.empty()) body["note"] = args.note;
  auto made = api->Post(*base + "/credits", body);
  if (!made.has_value()) return ctx.Fail(made.error());
  ctx.PrintObject(*made, {"id", "kind", "amount", "currency", "expires_at", "note"});
  return kExitOk;
}

int ListCredits(Context& ctx, const CreditArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.TenantBase(args.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  auto list = api->Get(*base + "/credits");
  if (!list.has_value()) return ctx.Fail(list.error());
  if (ctx.json_output()) {
    ctx.PrintJson(*list);
    return kExitOk;
  }
  ctx.out() << FormatObjects(kCreditColumns, ItemsOf(*list, "items"));
  for (const auto& b : ItemsOf(*list, "balances")) {
    ctx.out() << "Balance: " << CellText(FieldAt(b, "balance")) << " "
              << CellText(FieldAt(b, "currency")) << "\n";
  }
  return kExitOk;
}

}  // namespace

void AddBillingCommands(CLI::App& app, VerbTable& verbs) {
  CLI::App* books = AddGroup(app, "price-book", "The platform's price books (operators)");
  auto c = std::make_shared<BookArgs>();
  CLI::App* create = books->add_subcommand("create", "Make a price book with its first prices");
  create->add_option("name", c->name, "Its name (a-z, 0-9, '-')")->required();
  create->add_option("--currency", c->currency, "ISO 4217 code, e.g. USD")->required();
  create
      ->add_option("--entries", c->entries,
                   "The prices as JSON, or @FILE: [{\"meter\": \"gpu.whole\", \"model\": "
                   "\"H100-80GB\", \"price_minor\": \"249\"}, …]")
      ->required();
  create->add_option("--effective-from", c->effective_from, "From when (default: now)");
  create->add_option("--minimum", c->minimum, "Minimum charge per invoice, minor units");
  create->add_option("--note", c->note, "A note kept with the version");
  verbs.Add(create, [c](Context& ctx) { return CreateBook(ctx, *c); });
  auto v = std::make_shared<BookArgs>();
  CLI::App* version =
      books->add_subcommand("add-version", "Add a version of a book's prices, from now or later");
  version->add_option("book", v->name, "The book's id or name")->required();
  version->add_option("--entries", v->entries, "The prices as JSON, or @FILE")->required();
  version->add_option("--effective-from", v->effective_from, "From when (default: now)");
  version->add_option("--minimum", v->minimum, "Minimum charge per invoice, minor units");
  version->add_option("--note", v->note, "A note kept with the version");
  verbs.Add(version, [v](Context& ctx) { return AddVersion(ctx, *v); });
  auto g = std::make_shared<BookArgs>();
  CLI::App* get = books->add_subcommand("get", "A price book and every version of its prices");
  get->add_option("book", g->name, "The book's id or name")->required();
  verbs.Add(get, [g](Context& ctx) { return GetBook(ctx, *g); });
  CLI::App* list = books->add_subcommand("list", "The price books");
  verbs.Add(list, [](Context& ctx) { return ListBooks(ctx); });

  CLI::App* billing = AddGroup(app, "billing", "Plans, drafts and the proof of the books");
  auto d = std::make_shared<PlanArgs>();
  CLI::App* set_default = billing->add_subcommand(
      "set-default", "Bill tenants without a plan of their own on a price book (operators)");
  set_default->add_option("book", d->book, "The book's id or name")->required();
  set_default->add_option("--effective-from", d->effective_from, "From when (default: now)");
  verbs.Add(set_default, [d](Context& ctx) { return SetDefault(ctx, *d); });
  CLI::App* show_default = billing->add_subcommand("default", "The default price book");
  verbs.Add(show_default, [](Context& ctx) { return ShowDefault(ctx); });
  auto p = std::make_shared<PlanArgs>();
  CLI::App* set_plan =
      billing->add_subcommand("set-plan", "Set a tenant's next plan version (operators)");
  set_plan->add_option("--tenant", p->tenant, "Tenant id or name")->required();
  set_plan->add_option("--price-book", p->book, "The book's id or name")->required();
  set_plan->add_option("--effective-from", p->effective_from, "From when (default: now)");
  set_plan->add_option("--anchor-day", p->anchor_day, "Day of the month periods start, 1-28");
  set_plan->add_option("--discount-bp", p->discount_bp, "Basis points off usage");
  set_plan->add_option("--commitment", p->commitment, "Committed spend per period, minor units");
  set_plan->add_option("--entries", p->entries, "Contract prices as JSON, or @FILE");
  set_plan->add_option("--note", p->note, "A note kept with the version");
  set_plan->add_flag("--prepaid", p->prepaid,
                     "The tenant spends prepaid credit: with none left, new spend is refused");
  verbs.Add(set_plan, [p](Context& ctx) { return SetPlan(ctx, *p); });
  auto s = std::make_shared<PlanArgs>();
  CLI::App* plan = billing->add_subcommand("plan", "A tenant's plan and the prices in force");
  plan->add_option("--tenant", s->tenant, "Tenant id or name (default: your own)");
  verbs.Add(plan, [s](Context& ctx) { return ShowPlan(ctx, *s); });
  auto dr = std::make_shared<InvoiceArgs>();
  CLI::App* draft =
      billing->add_subcommand("draft", "The invoice of a period as it stands now (live)");
  draft->add_option("--tenant", dr->tenant, "Tenant id or name (default: your own)");
  draft->add_option("--period", dr->period, "YYYY-MM (default: the current period)");
  draft->add_option("--by", dr->by, "Also show spend per project or per API key")
      ->check(CLI::IsMember({"project", "key"}));
  verbs.Add(draft, [dr](Context& ctx) { return Draft(ctx, *dr); });
  auto vr = std::make_shared<InvoiceArgs>();
  CLI::App* verify = billing->add_subcommand(
      "verify",
      "Re-rate a period from the raw usage records and prove each was rated exactly once and each "
      "final invoice sums its rows; exits 1 when not");
  verify->add_option("period", vr->period, "YYYY-MM")->required();
  verify->add_option("--tenant", vr->tenant, "Only this tenant (its id)");
  verbs.Add(verify, [vr](Context& ctx) { return Verify(ctx, *vr); });

  CLI::App* invoice = AddGroup(app, "invoice", "Final invoices");
  auto il = std::make_shared<InvoiceArgs>();
  CLI::App* ilist = invoice->add_subcommand("list", "A tenant's final invoices");
  ilist->add_option("--tenant", il->tenant, "Tenant id or name (default: your own)");
  verbs.Add(ilist, [il](Context& ctx) { return ListInvoices(ctx, *il); });
  auto ig = std::make_shared<InvoiceArgs>();
  CLI::App* iget = invoice->add_subcommand("get", "A final invoice");
  iget->add_option("id", ig->id, "The invoice's id")->required();
  iget->add_option("--tenant", ig->tenant, "Tenant id or name (default: your own)");
  verbs.Add(iget, [ig](Context& ctx) { return GetInvoice(ctx, *ig); });
  auto ic = std::make_shared<InvoiceArgs>();
  CLI::App* icsv = invoice->add_subcommand("csv", "A final invoice as CSV");
  icsv->add_option("id", ic->id, "The invoice's id")->required();
  icsv->add_option("--tenant", ic->tenant, "Tenant id or name (default: your own)");
  icsv->add_option("--output", ic->output, "Write it to this file (default: standard output)");
  verbs.Add(icsv, [ic](Context& ctx) { return InvoiceCsv(ctx, *ic); });
  auto fi = std::make_shared<InvoiceArgs>();
  CLI::App* fin = invoice->add_subcommand(
      "finalize", "Finalise a tenant's invoice for an ended period (operators)");
  fin->add_option("--tenant", fi->tenant, "Tenant id or name")->required();
  fin->add_option("--period", fi->period, "YYYY-MM")->required();
  verbs.Add(fin, [fi](Context& ctx) { return Finalize(ctx, *fi); });

  CLI::App* credit = AddGroup(app, "credit", "Prepaid credit and grants, used up by invoices");
  auto cg = std::make_shared<CreditArgs>();
  CLI::App* grant = credit->add_subcommand("grant", "Grant a tenant credit (operators)");
  grant->add_option("--tenant", cg->tenant, "Tenant id or name")->required();
  grant->add_option("--amount-minor", cg->amount_minor, "Minor units of the tenant's currency")
      ->required();
  grant->add_option("--kind", cg->kind, "grant (given, default) or prepaid (bought)")
      ->check(CLI::IsMember({"grant", "prepaid"}));
  grant->add_option("--expires-at", cg->expires_at, "When it stops paying (default: never)");
  grant->add_option("--note", cg->note, "Shown on the invoices it pays");
  verbs.Add(grant, [cg](Context& ctx) { return GrantCredit(ctx, *cg); });
  auto cl = std::make_shared<CreditArgs>();
  CLI::App* clist = credit->add_subcommand("list", "Credit grants, what remains, the balance");
  clist->add_option("--tenant", cl->tenant, "Tenant id or name (default: your own)");
  verbs.Add(clist, [cl](Context& ctx) { return ListCredits(ctx, *cl); });
}

}  // namespace atrium::cli
