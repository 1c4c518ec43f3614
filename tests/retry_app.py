"""The tutorial's room booking (wakeful.examples.tutorial) with a check that asks the model again
instead of parking the task: a proposal that is not the booking on record is refused with what the
record says, and the runtime shows the model that reason in its next window. It also takes a change
request of its own kind, refused once the booking has started (ctx.started).

Workers load it with `--app retry_app:app` (tests/ on the path)."""

from __future__ import annotations

import dataclasses

from wakeful.examples import tutorial
from wakeful.examples.tutorial import BookArgs, Booking, BookRoom
from wakeful.sdk import REQUESTER, Accept, App, Context, Effect, Next, Refuse, Review, policy_file

CHANGE = "booking.change"  # the app's own change request: another head count


def check(ctx: Context[Booking], effect: Effect) -> Effect | Refuse | Review:
    args = effect.args
    assert isinstance(args, BookArgs)
    if (args.task_id, args.room, args.day) != (ctx.task_id, ctx.state.room, ctx.state.day):
        return Refuse(
            f"propose the booking on record: room {ctx.state.room} on {ctx.state.day} for task {ctx.task_id}"
        )
    return effect


def change(ctx: Context[Booking]) -> Next[Booking] | Refuse:
    if ctx.op_key(BookRoom.name) in ctx.started:
        return Refuse(f"the booking for version {ctx.version} has started; changing it now could book twice")
    people = ctx.payload.get("people")
    if not isinstance(people, int) or isinstance(people, bool) or people < 1:
        return Refuse(f"people is a whole number of at least 1, not {people!r}")
    return Next(ctx.stage, ctx.state.model_copy(update={"people": people}), amended=True)


rooms = dataclasses.replace(
    tutorial.rooms, check=check, events={CHANGE: Accept(change, signers=(REQUESTER,))}
)
app = App(
    name="rooms_retry",
    workflows=[rooms],
    tools=[BookRoom()],
    policy=policy_file(tutorial.__file__, "tutorial.cedar"),
)
