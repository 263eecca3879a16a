// Credits: prepaid money and grants, used up by final invoices. Pure.
//
// A grant pays a period's invoice when it is of the invoice's currency,
// was granted before the period ended and still lived when it ended
// (expires_at 0, or at or after the period's end). Usable grants pay in
// order: the earliest to expire first (those that never expire last),
// then the oldest; each pays what it has left, up to what the invoice
// still owes, as a "credit" line; an invoice never goes below zero. What
// a grant paid is taken off what remains of it when the invoice is final.
//
// Under a prepaid plan the tenant spends its credits: its balance is what
// remains of its live grants, and the billing service keeps a hard
// budget of that amount for it (scope "prepaid"), so a tenant that has
// spent its balance is refused new spend like one over a hard budget.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "billing/invoice.h"
#include "billing/period.h"
#include "model/billing_records.h"

namespace atrium::billing {

// The grants that may pay `period`'s invoice in `currency`, in the order
// they pay.
std::vector<CreditGrant> UsableCredits(std::vector<CreditGrant> grants, const std::string& currency,
                                       const Period& period);

// Adds a credit line per grant that pays (negative amounts) and lowers the
// total; returns what each paid (invoice_id left empty).
std::vector<CreditApplication> ApplyCredits(Invoice& invoice,
                                            const std::vector<CreditGrant>& usable);

// What remains of the tenant's grants in `currency` that live at `now`.
int64_t LiveBalance(const std::vector<CreditGrant>& grants, const std::string& currency,
                    int64_t now);

}  // namespace atrium::billing
