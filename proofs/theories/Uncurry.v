(** * [uncurried]: from the record's one-conjunction hypotheses to curried ones.

    A theorem states its hypotheses as one conjunction, [forall x, H x -> C x], as the
    reviewed record does ([proofs/spec/Spec.v]); [uncurried] turns such a goal into the
    curried [forall x, H1 -> H2 -> ... -> C x] its proof is written for.  One tactic for
    the rational development ([Sums] exports it) and the real one ([Real]); it uses only
    [/\] and [proj1]/[proj2], so neither development's axioms change. *)

Ltac uncurried :=
  lazymatch goal with
  | |- ?P /\ ?Q -> ?C =>
      refine ((fun (f : P -> Q -> C) (h : P /\ Q) => f (proj1 h) (proj2 h)) _);
      let x := fresh "H" in intro x; uncurried_rest; revert x
  | |- forall x : _, _ => let y := fresh x in intro y; uncurried; revert y
  end
with uncurried_rest :=
  lazymatch goal with
  | |- _ /\ _ -> _ => uncurried
  | |- _ => idtac
  end.
