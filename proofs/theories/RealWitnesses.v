(** * Non-vacuity witnesses of the theorems over R ([Real.v]).

    Kept apart from [Witnesses.v] (the QArith ones) so that a change to the QArith
    development does not make [exchange proofs] ask [Print Assumptions] about these
    again (each walks the Reals construction). *)

From Coq Require Import Reals Lra Lia.
From Exchange Require Import Real.

(** ** Witnesses for the theorems over R ([Real.v]): the group [A = (1, -1)]. *)
Open Scope R_scope.

Definition RA2 (i : nat) : R := match i with O => 1 | S O => -1 | _ => 0 end.

Lemma RA2_zero_sum : Rsum 2 RA2 = 0.
Proof. simpl. ring. Qed.

Lemma W_R_T1_sufficiency : exists G (A w : nat -> R) (w0 : R),
  (1 < G)%nat /\ A O <> 0 /\ Rsum G A = 0 /\ (forall i, (i < G)%nat -> w i = w0).
Proof.
  exists 2%nat, RA2, (fun _ => 1), 1. repeat split; try lia.
  - simpl. lra.
  - exact RA2_zero_sum.
Qed.

Lemma W_R_T2_necessity_onehot : exists G (w : nat -> R) (sigma : (nat -> R) -> R),
  (1 < G)%nat /\ (forall j, (j < G)%nat -> 0 < sigma (Rind j)) /\
  (forall j, (j < G)%nat -> RK G (Radv G (sigma (Rind j)) (Rind j)) w = 0).
Proof.
  exists 2%nat, (fun _ => 1), (fun _ => 1). repeat split; [lia| intros; lra |].
  intros j _. apply (R_T1_sufficiency 2 _ _ 1); [apply Radv_zero_sum | reflexivity].
Qed.

Lemma W_R_T2_necessity_reals : exists G (w : nat -> R) (sigma : (nat -> R) -> R),
  (2 <= G)%nat /\
  (forall r, (exists a b, (a < G)%nat /\ (b < G)%nat /\ r a <> r b) -> 0 < sigma r) /\
  (forall r, (exists a b, (a < G)%nat /\ (b < G)%nat /\ r a <> r b) ->
     RK G (Radv G (sigma r) r) w = 0).
Proof.
  exists 2%nat, (fun _ => 1), (fun _ => 1). repeat split; [lia| intros; lra |].
  intros r _. apply (R_T1_sufficiency 2 _ _ 1); [apply Radv_zero_sum | reflexivity].
Qed.

Lemma W_R_T2_necessity_std : exists G (w : nat -> R), (2 <= G)%nat /\
  (forall j, (j < G)%nat -> RK G (Radv G (Rstd G (Rind j)) (Rind j)) w = 0).
Proof.
  exists 2%nat, (fun _ => 1). split; [lia|].
  intros j _. apply (R_T1_sufficiency 2 _ _ 1); [apply Radv_zero_sum | reflexivity].
Qed.

Lemma W_R_null_on_equal_rewards : exists G (s : R) (r : nat -> R) (r0 : R),
  (1 < G)%nat /\ 0 < s /\ (forall i, (i < G)%nat -> r i = r0).
Proof. exists 2%nat, 1, (fun _ => 1), 1. repeat split; [lia|lra]. Qed.

Lemma W_R_T3_one_correct : exists G c : nat, (1 < G)%nat /\ (c < G)%nat.
Proof. exists 2%nat, O. lia. Qed.

Lemma W_R_T3_harmonic_mean : exists G (L : nat -> R) (c : nat),
  (1 < G)%nat /\ (c < G)%nat /\ (forall i, (i < G)%nat -> 0 < L i) /\ L O <> L 1%nat.
Proof.
  exists 2%nat, (fun i => INR (S i)), O. repeat split; try lia.
  - intros i _. apply lt_0_INR. lia.
  - simpl. lra.
Qed.

Lemma W_R_T4_above : exists G (A : nat -> R) (eps_low eps_high rho : R),
  0 <= eps_low /\ 0 <= eps_high /\ 1 + eps_high < rho /\
  (exists j, (j < G)%nat /\ A j < 0) /\ Rsum G A = 0.
Proof.
  exists 2%nat, RA2, (1/5), (1/5), 2. repeat split; try lra.
  - exists 1%nat. split; [lia|simpl; lra].
  - exact RA2_zero_sum.
Qed.

Lemma W_R_T4_below : exists G (A : nat -> R) (eps_low eps_high rho : R),
  0 <= eps_low /\ 0 <= eps_high /\ 0 < rho /\ rho < 1 - eps_low /\
  (exists j, (j < G)%nat /\ 0 < A j) /\ Rsum G A = 0.
Proof.
  exists 2%nat, RA2, (1/5), (1/5), (1/2). repeat split; try lra.
  - exists O. split; [lia|simpl; lra].
  - exact RA2_zero_sum.
Qed.

Lemma W_R_T4_inside_cancels : exists G (A : nat -> R) (eps_low eps_high rho : R),
  1 - eps_low <= rho /\ rho <= 1 + eps_high /\ Rsum G A = 0 /\ A O <> 0.
Proof.
  exists 2%nat, RA2, (1/5), (1/5), 1. repeat split; try lra.
  - exact RA2_zero_sum.
  - simpl. lra.
Qed.

Lemma W_R_M1_gspo : exists G : nat, (2 <= G)%nat.
Proof. exists 2%nat. lia. Qed.

Lemma W_R_M1_gspo_equal_lengths : exists G L : nat, (2 <= G)%nat /\ (0 < L)%nat.
Proof. exists 2%nat, 1%nat. lia. Qed.

Lemma W_R_Cor33_hyperplane : exists G (A : nat -> R), exists j, (j < G)%nat /\ A j <> 0.
Proof. exists 2%nat, RA2, O. split; [lia|simpl; lra]. Qed.

